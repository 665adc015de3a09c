"""Checks a triad-data token file (u16) against SentencePiece's own
encoding: MODEL FILE EOD TEXT... (EOD -1: none after each document)."""

import struct
import sys

import sentencepiece

model, path, eod, texts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
processor = sentencepiece.SentencePieceProcessor(model_file=model)
expected = []
for text in texts:
    with open(text, encoding="utf-8") as f:
        expected += processor.encode(f.read())
    if eod >= 0:
        expected.append(eod)
data = open(path, "rb").read()
got = list(struct.unpack(f"<{len(data) // 2}H", data))
print(f"the same ids as sentencepiece: {got == expected}")
if got != expected:
    print(f"got {len(got)} ids, expected {len(expected)}; first differences: "
          f"{[(i, a, b) for i, (a, b) in enumerate(zip(got, expected)) if a != b][:5]}")
