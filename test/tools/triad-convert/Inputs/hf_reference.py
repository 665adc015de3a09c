#!/usr/bin/env python3
"""An independent reference for Hugging Face weights: the forward pass of
transformers' GPT2LMHeadModel, LlamaForCausalLM, GPTNeoXForCausalLM,
OPTForCausalLM and BloomForCausalLM written from their modeling files, in
float64 with PyTorch, reading the checkpoint by Hugging Face's tensor names.

  hf_reference.py make CONFIG OUT.safetensors [--seed N] [--dtype f32|bf16]
      writes random weights of every tensor the config's class has (and the
      buffers GPT-2 and GPT-NeoX save beside them)
  hf_reference.py loss CONFIG WEIGHTS.safetensors TEXT
      prints the mean next-token cross entropy over TEXT's bytes (token ids
      0-255): positions 0..n-2 predict bytes 1..n-1
  hf_reference.py check CONFIG WEIGHTS.safetensors TEXT METRICS.jsonl
      compares that loss with the first step's in a triad-run metrics file
      (a relative difference over 1e-5 prints MISMATCH)
  hf_reference.py split IN.safetensors OUT1.safetensors OUT2.safetensors
      writes IN's tensors as a checkpoint of two shards
  hf_reference.py strip PREFIX IN.safetensors OUT.safetensors
      writes IN's tensors with PREFIX taken off their names
  hf_reference.py same A.safetensors B.safetensors
      prints whether two files hold the same tensors (names, shapes, bits;
      A's buffers aside)
"""

import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
        tensors[name] = t.reshape(entry["shape"])
    return tensors


def write_safetensors(path, tensors):
    names = {v: k for k, v in DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def shapes(c):
    """Every tensor of the config's *ForCausalLM class: name -> shape."""
    t = c["model_type"]
    s = {}
    if t == "gpt2":
        h, f = c["n_embd"], c.get("n_inner") or 4 * c["n_embd"]
        s["transformer.wte.weight"] = [c["vocab_size"], h]
        s["transformer.wpe.weight"] = [c["n_positions"], h]
        for i in range(c["n_layer"]):
            p = f"transformer.h.{i}."
            for n in ("ln_1", "ln_2"):
                s[p + n + ".weight"] = s[p + n + ".bias"] = [h]
            s[p + "attn.c_attn.weight"] = [h, 3 * h]
            s[p + "attn.c_attn.bias"] = [3 * h]
            s[p + "attn.c_proj.weight"] = [h, h]
            s[p + "attn.c_proj.bias"] = [h]
            s[p + "mlp.c_fc.weight"] = [h, f]
            s[p + "mlp.c_fc.bias"] = [f]
            s[p + "mlp.c_proj.weight"] = [f, h]
            s[p + "mlp.c_proj.bias"] = [h]
        s["transformer.ln_f.weight"] = s["transformer.ln_f.bias"] = [h]
    elif t == "llama":
        h, f = c["hidden_size"], c["intermediate_size"]
        kv = c.get("num_key_value_heads", c["num_attention_heads"]) * (
            h // c["num_attention_heads"])
        s["model.embed_tokens.weight"] = [c["vocab_size"], h]
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            s[p + "input_layernorm.weight"] = [h]
            s[p + "post_attention_layernorm.weight"] = [h]
            s[p + "self_attn.q_proj.weight"] = [h, h]
            s[p + "self_attn.k_proj.weight"] = [kv, h]
            s[p + "self_attn.v_proj.weight"] = [kv, h]
            s[p + "self_attn.o_proj.weight"] = [h, h]
            s[p + "mlp.gate_proj.weight"] = [f, h]
            s[p + "mlp.up_proj.weight"] = [f, h]
            s[p + "mlp.down_proj.weight"] = [h, f]
        s["model.norm.weight"] = [h]
        if not c.get("tie_word_embeddings", False):
            s["lm_head.weight"] = [c["vocab_size"], h]
    elif t in ("gpt_neox", "bloom"):
        h = c["hidden_size"]
        f = c.get("intermediate_size", 4 * h)
        neox = t == "gpt_neox"
        base = "gpt_neox." if neox else "transformer."
        s[base + ("embed_in.weight" if neox else "word_embeddings.weight")] = [
            c["vocab_size"], h]
        if not neox:
            s[base + "word_embeddings_layernorm.weight"] = [h]
            s[base + "word_embeddings_layernorm.bias"] = [h]
        layers = c["num_hidden_layers"] if neox else c["n_layer"]
        attn = "attention." if neox else "self_attention."
        for i in range(layers):
            p = base + ("layers." if neox else "h.") + f"{i}."
            for n in ("input_layernorm", "post_attention_layernorm"):
                s[p + n + ".weight"] = s[p + n + ".bias"] = [h]
            s[p + attn + "query_key_value.weight"] = [3 * h, h]
            s[p + attn + "query_key_value.bias"] = [3 * h]
            s[p + attn + "dense.weight"] = [h, h]
            s[p + attn + "dense.bias"] = [h]
            s[p + "mlp.dense_h_to_4h.weight"] = [f, h]
            s[p + "mlp.dense_h_to_4h.bias"] = [f]
            s[p + "mlp.dense_4h_to_h.weight"] = [h, f]
            s[p + "mlp.dense_4h_to_h.bias"] = [h]
        final = "final_layer_norm" if neox else "ln_f"
        s[base + final + ".weight"] = s[base + final + ".bias"] = [h]
        if neox and not c.get("tie_word_embeddings", False):
            s["embed_out.weight"] = [c["vocab_size"], h]
    elif t == "opt":
        h, f = c["hidden_size"], c["ffn_dim"]
        s["model.decoder.embed_tokens.weight"] = [c["vocab_size"], h]
        s["model.decoder.embed_positions.weight"] = [
            c["max_position_embeddings"] + 2, h]
        for i in range(c["num_hidden_layers"]):
            p = f"model.decoder.layers.{i}."
            for n in ("self_attn_layer_norm", "final_layer_norm"):
                s[p + n + ".weight"] = s[p + n + ".bias"] = [h]
            for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
                s[p + "self_attn." + n + ".weight"] = [h, h]
                s[p + "self_attn." + n + ".bias"] = [h]
            s[p + "fc1.weight"] = [f, h]
            s[p + "fc1.bias"] = [f]
            s[p + "fc2.weight"] = [h, f]
            s[p + "fc2.bias"] = [h]
        s["model.decoder.final_layer_norm.weight"] = [h]
        s["model.decoder.final_layer_norm.bias"] = [h]
    else:
        sys.exit(f"hf_reference: unsupported model_type {t}")
    return s


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) *
                                     (x + 0.044715 * x ** 3)))


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def rotate(x, base, dims):
    """Rotary embeddings on the first `dims` features of each head
    (transformers' rotate_half: feature i pairs with i + dims / 2)."""
    s = x.shape[-2]
    inv = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims))
    angles = torch.outer(torch.arange(s, dtype=torch.float64), inv)
    cos = torch.cat([angles.cos(), angles.cos()], -1)
    sin = torch.cat([angles.sin(), angles.sin()], -1)
    r, rest = x[..., :dims], x[..., dims:]
    half = dims // 2
    rotated = torch.cat([-r[..., half:], r[..., :half]], -1)
    return torch.cat([r * cos + rotated * sin, rest], -1)


def attend(q, k, v, bias=None, scale=None):
    """q [heads, s, d], k and v [heads, s, d]: causal attention."""
    s, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-1, -2) * (scale if scale else 1 / math.sqrt(d))
    if bias is not None:
        scores = scores + bias
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def heads(x, n):
    s, h = x.shape
    return x.reshape(s, n, h // n).transpose(0, 1)


def merge(x):
    n, s, d = x.shape
    return x.transpose(0, 1).reshape(s, n * d)


def alibi_slopes(n):
    def power_of_two(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][:n - closest]


def logits(c, w, ids):
    t = c["model_type"]
    linear = lambda x, p, bias=True: x @ w[p + ".weight"].T + (
        w[p + ".bias"] if bias and p + ".bias" in w else 0)
    s = len(ids)
    if t == "gpt2":
        eps, n = c.get("layer_norm_epsilon", 1e-5), c["n_head"]
        x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:s]
        for i in range(c["n_layer"]):
            p = f"transformer.h.{i}."
            a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
            qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.split(c["n_embd"], -1)
            o = merge(attend(heads(q, n), heads(k, n), heads(v, n)))
            x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
            m = gelu_tanh(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = layer_norm(x, w["transformer.ln_f.weight"],
                       w["transformer.ln_f.bias"], eps)
        return x @ w["transformer.wte.weight"].T
    if t == "llama":
        eps, n = c.get("rms_norm_eps", 1e-6), c["num_attention_heads"]
        kv = c.get("num_key_value_heads", n)
        d = c["hidden_size"] // n
        base = c.get("rope_theta", 10000.0)
        x = w["model.embed_tokens.weight"][ids]
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            q = rotate(heads(linear(a, p + "self_attn.q_proj"), n), base, d)
            k = rotate(heads(linear(a, p + "self_attn.k_proj"), kv), base, d)
            v = heads(linear(a, p + "self_attn.v_proj"), kv)
            k = k.repeat_interleave(n // kv, 0)
            v = v.repeat_interleave(n // kv, 0)
            x = x + linear(merge(attend(q, k, v)), p + "self_attn.o_proj")
            m = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            g = linear(m, p + "mlp.gate_proj")
            m = linear(torch.nn.functional.silu(g) * linear(m, p + "mlp.up_proj"),
                       p + "mlp.down_proj")
            x = x + m
        x = rms_norm(x, w["model.norm.weight"], eps)
        table = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        return x @ table.T
    if t in ("gpt_neox", "bloom"):
        neox = t == "gpt_neox"
        eps = c.get("layer_norm_eps" if neox else "layer_norm_epsilon", 1e-5)
        n = c["num_attention_heads"] if neox else c["n_head"]
        d = c["hidden_size"] // n
        base = "gpt_neox." if neox else "transformer."
        attn = "attention." if neox else "self_attention."
        if neox:
            x = w[base + "embed_in.weight"][ids]
            act = gelu if c.get("hidden_act", "gelu") == "gelu" else gelu_tanh
        else:
            x = w[base + "word_embeddings.weight"][ids]
            x = layer_norm(x, w[base + "word_embeddings_layernorm.weight"],
                           w[base + "word_embeddings_layernorm.bias"], eps)
            act = gelu_tanh
            slopes = torch.tensor(alibi_slopes(n), dtype=torch.float64)
            bias = slopes[:, None, None] * torch.arange(
                s, dtype=torch.float64)[None, None, :]
        layers = c["num_hidden_layers"] if neox else c["n_layer"]
        for i in range(layers):
            p = base + ("layers." if neox else "h.") + f"{i}."
            a = layer_norm(x, w[p + "input_layernorm.weight"],
                           w[p + "input_layernorm.bias"], eps)
            qkv = linear(a, p + attn + "query_key_value")
            qkv = qkv.reshape(s, n, 3, d)
            q, k, v = (qkv[:, :, j].transpose(0, 1) for j in range(3))
            if neox:
                dims = int(d * c.get("rotary_pct", 0.25))
                rb = c.get("rotary_emb_base", 10000.0)
                q, k = rotate(q, rb, dims), rotate(k, rb, dims)
                o = attend(q, k, v)
            else:
                o = attend(q, k, v, bias=bias)
            o = linear(merge(o), p + attn + "dense")
            if neox and c.get("use_parallel_residual", True):
                m = layer_norm(x, w[p + "post_attention_layernorm.weight"],
                               w[p + "post_attention_layernorm.bias"], eps)
                m = linear(act(linear(m, p + "mlp.dense_h_to_4h")),
                           p + "mlp.dense_4h_to_h")
                x = x + o + m
            else:
                x = x + o
                m = layer_norm(x, w[p + "post_attention_layernorm.weight"],
                               w[p + "post_attention_layernorm.bias"], eps)
                m = linear(act(linear(m, p + "mlp.dense_h_to_4h")),
                           p + "mlp.dense_4h_to_h")
                x = x + m
        final = "final_layer_norm" if neox else "ln_f"
        x = layer_norm(x, w[base + final + ".weight"],
                       w[base + final + ".bias"], eps)
        table = (w.get("embed_out.weight", w[base + "embed_in.weight"])
                 if neox else w[base + "word_embeddings.weight"])
        return x @ table.T
    if t == "opt":
        n, p0 = c["num_attention_heads"], "model.decoder."
        d = c["hidden_size"] // n
        x = (w[p0 + "embed_tokens.weight"][ids] +
             w[p0 + "embed_positions.weight"][2:2 + s])
        for i in range(c["num_hidden_layers"]):
            p = p0 + f"layers.{i}."
            a = layer_norm(x, w[p + "self_attn_layer_norm.weight"],
                           w[p + "self_attn_layer_norm.bias"], 1e-5)
            q = heads(linear(a, p + "self_attn.q_proj") * d ** -0.5, n)
            k = heads(linear(a, p + "self_attn.k_proj"), n)
            v = heads(linear(a, p + "self_attn.v_proj"), n)
            x = x + linear(merge(attend(q, k, v, scale=1.0)),
                           p + "self_attn.out_proj")
            m = layer_norm(x, w[p + "final_layer_norm.weight"],
                           w[p + "final_layer_norm.bias"], 1e-5)
            x = x + linear(torch.relu(linear(m, p + "fc1")), p + "fc2")
        x = layer_norm(x, w[p0 + "final_layer_norm.weight"],
                       w[p0 + "final_layer_norm.bias"], 1e-5)
        return x @ w[p0 + "embed_tokens.weight"].T
    sys.exit(f"hf_reference: unsupported model_type {t}")


def main():
    args = sys.argv[1:]
    if args and args[0] == "make":
        config = json.load(open(args[1]))
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 1
        dtype = torch.bfloat16 if "bf16" in args else torch.float32
        g = torch.Generator().manual_seed(seed)
        tensors = {}
        for name, shape in shapes(config).items():
            scale = 0.2 if not name.endswith("weight") or len(shape) > 1 else 0.1
            t = torch.randn(shape, generator=g) * scale
            if name.endswith("norm.weight") or "ln_" in name and name.endswith(
                    "weight") or name.endswith("layernorm.weight"):
                t = 1 + t
            tensors[name] = t.to(dtype)
        # Buffers Hugging Face saves beside GPT-2's and GPT-NeoX's weights.
        if config["model_type"] == "gpt2":
            s = config["n_positions"]
            tensors["transformer.h.0.attn.bias"] = torch.ones(1, 1, s, s).to(dtype)
        write_safetensors(args[2], tensors)
        return 0
    if args and args[0] == "loss":
        config = json.load(open(args[1]))
        w = {k: v.to(torch.float64) for k, v in read_safetensors(args[2]).items()}
        ids = torch.tensor(list(open(args[3], "rb").read()), dtype=torch.long)
        out = logits(config, w, ids[:-1])
        loss = torch.nn.functional.cross_entropy(out, ids[1:])
        print(f"{loss.item():.9f}")
        return 0
    if args and args[0] == "check":
        # The reference loss against the first step's loss in a triad-run
        # metrics file (the loss of the initial weights on the same window).
        config = json.load(open(args[1]))
        w = {k: v.to(torch.float64) for k, v in read_safetensors(args[2]).items()}
        ids = torch.tensor(list(open(args[3], "rb").read()), dtype=torch.long)
        reference = torch.nn.functional.cross_entropy(
            logits(config, w, ids[:-1]), ids[1:]).item()
        triad = json.loads(open(args[4]).readline())["loss"]
        difference = abs(triad - reference) / abs(reference)
        print(f"{config['model_type']}: reference {reference:.7f}, Triad "
              f"{triad:.7f}, relative difference {difference:.1e}"
              + ("" if difference <= 1e-5 else " MISMATCH"))
        return 0
    if args and args[0] == "split":
        # A sharded checkpoint: the first half of the tensors in one file,
        # the rest in another.
        tensors = read_safetensors(args[1])
        names = list(tensors)
        half = len(names) // 2
        write_safetensors(args[2], {k: tensors[k] for k in names[:half]})
        write_safetensors(args[3], {k: tensors[k] for k in names[half:]})
        return 0
    if args and args[0] == "strip":
        # The file of the base model class (GPT2Model): names without the
        # *ForCausalLM class's prefix.
        prefix, tensors = args[1], read_safetensors(args[2])
        write_safetensors(args[3], {
            (k[len(prefix):] if k.startswith(prefix) else k): v
            for k, v in tensors.items()})
        return 0
    if args and args[0] == "same":
        # Buffers (GPT-2's attention mask) are not weights: A's are skipped.
        a, b = read_safetensors(args[1]), read_safetensors(args[2])
        a = {k: v for k, v in a.items() if not k.endswith(".attn.bias")}
        if a.keys() != b.keys():
            print("different names:", sorted(set(a) ^ set(b)))
            return 1
        for name in a:
            if a[name].shape != b[name].shape or not torch.equal(a[name], b[name]):
                print(f"different tensor {name}")
                return 1
        print(f"same {len(a)} tensors")
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
