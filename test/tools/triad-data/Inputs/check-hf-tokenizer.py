"""Checks a triad-data token file (u16) against Hugging Face's tokenizers:
TOKENIZER_JSON FILE EOD TEXT... (EOD -1: none after each document)."""

import struct
import sys

from tokenizers import Tokenizer

path, data_path, eod, texts = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                               sys.argv[4:])
tokenizer = Tokenizer.from_file(path)
expected = []
for text in texts:
    with open(text, encoding="utf-8") as f:
        expected += tokenizer.encode(f.read(), add_special_tokens=False).ids
    if eod >= 0:
        expected.append(eod)
data = open(data_path, "rb").read()
got = list(struct.unpack(f"<{len(data) // 2}H", data))
print(f"the same ids as tokenizers: {got == expected}")
