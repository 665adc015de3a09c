#!/usr/bin/env python3
"""triad-convert against Hugging Face's transformers itself (run with the
environment scripts/setup.sh makes: .venv-transformers).

  transformers_check.py make CONFIG DIR
      builds the config's *ForCausalLM class with random weights (every
      tensor, biases and norms included) and save_pretrained's it to DIR
      (config.json, model.safetensors)
  transformers_check.py check DIR TEXT METRICS.jsonl
      the model's mean next-token cross entropy over TEXT's bytes against
      the first step's loss in a triad-run metrics file (MISMATCH over 1e-5
      relative)
  transformers_check.py logits DIR OTHER_DIR TEXT
      loads both folders with from_pretrained and prints the largest
      difference of their logits on TEXT (MISMATCH over 1e-6)
"""

import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def window(path):
    return torch.tensor([list(open(path, "rb").read())])


def main():
    args = sys.argv[1:]
    if args and args[0] == "make":
        config = AutoConfig.for_model(**json.load(open(args[1])))
        torch.manual_seed(3)
        model = AutoModelForCausalLM.from_config(config)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.2)
        model.save_pretrained(args[2], safe_serialization=True)
        return 0
    if args and args[0] == "check":
        model = AutoModelForCausalLM.from_pretrained(args[1])
        ids = window(args[2])
        with torch.no_grad():
            logits = model(ids[:, :-1]).logits[0].double()
        reference = torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item()
        triad = json.loads(open(args[3]).readline())["loss"]
        difference = abs(triad - reference) / abs(reference)
        print(f"{model.config.model_type}: transformers {reference:.7f}, Triad "
              f"{triad:.7f}, relative difference {difference:.1e}"
              + ("" if difference <= 1e-5 else " MISMATCH"))
        return 0
    if args and args[0] == "logits":
        ids = window(args[3])[:, :-1]
        outputs = []
        for path in args[1:3]:
            model = AutoModelForCausalLM.from_pretrained(path)
            with torch.no_grad():
                outputs.append(model(ids).logits)
        difference = (outputs[0] - outputs[1]).abs().max().item()
        print(f"largest logit difference {difference:.1e}"
              + ("" if difference <= 1e-6 else " MISMATCH"))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
