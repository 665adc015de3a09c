"""triad-data's bridge to Hugging Face's tokenizers library (run in the
project's Python environment): encodes documents with a tokenizer.json.

  python hf_tokenize.py TOKENIZER_JSON FILE...
  python hf_tokenize.py --encode-stdin TOKENIZER_JSON
  python hf_tokenize.py --decode TOKENIZER_JSON

Encoding writes to standard output one header line, "vocab V eod E" (E:
the id of the first of <|endoftext|>, </s>, <eos>, <|end_of_text|> the
vocabulary has, -1 for none), then for each file (or for the text on
standard input) a line "N" followed by N little-endian uint32 ids.
Decoding reads little-endian uint32 ids on standard input and writes their
text (UTF-8). Errors go to standard error with exit status 1.
"""

import struct
import sys

END_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


def main():
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("Hugging Face's tokenizers is not installed in this Python "
                 "environment (scripts/setup.sh installs it into .venv)")
    mode = sys.argv[1] if sys.argv[1] in ("--encode-stdin",
                                          "--decode") else None
    args = sys.argv[2:] if mode else sys.argv[1:]
    path, files = args[0], args[1:]
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as error:  # the library raises its own types
        sys.exit(f"cannot load '{path}': {error}")
    out = sys.stdout.buffer
    if mode == "--decode":
        data = sys.stdin.buffer.read()
        ids = list(struct.unpack(f"<{len(data) // 4}I", data[:len(data) // 4 * 4]))
        out.write(tokenizer.decode(ids, skip_special_tokens=False).encode())
        out.flush()
        return
    vocabulary = tokenizer.get_vocab_size(with_added_tokens=True)
    eod = next((tokenizer.token_to_id(t) for t in END_TOKENS
                if tokenizer.token_to_id(t) is not None), -1)
    out.write(f"vocab {vocabulary} eod {eod}\n".encode())
    texts = []
    if mode == "--encode-stdin":
        texts.append(sys.stdin.buffer.read().decode("utf-8", errors="replace"))
    for name in files:
        try:
            with open(name, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        except OSError as error:
            sys.exit(f"cannot read '{name}': {error.strerror}")
    # The library encodes the batch on its own threads.
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids = encoding.ids
        out.write(f"{len(ids)}\n".encode())
        out.write(struct.pack(f"<{len(ids)}I", *ids))
    out.flush()


if __name__ == "__main__":
    main()
