#!/usr/bin/python3
"""Encoding throughput of triad-data: the fortune texts (the demo's corpus)
byte-level and with a SentencePiece model trained on them here, against
SentencePiece's own Python module encoding the same files with the same
model in the same run. Prints MB/s of text for each and the ratio.

  /usr/bin/python3 bench/encoding_rate.py [--build build] [--vocab 8000] [--rounds 3]

Uses Debian's python3-sentencepiece (scripts/setup.sh installs it). A
benchmark, not a test.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import sentencepiece

FORTUNES = "/usr/share/games/fortunes"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tool = os.path.join(args.build, "bin", "triad-data")
    if not os.access(tool, os.X_OK):
        sys.exit(f"tokenize: {tool} is missing; build Triad first")
    files = sorted(os.path.join(FORTUNES, name) for name in os.listdir(FORTUNES)
                   if not name.endswith((".dat", ".u8")) and
                   os.path.isfile(os.path.join(FORTUNES, name)))
    if not files:
        sys.exit(f"tokenize: no texts under {FORTUNES} (install fortunes)")
    megabytes = sum(os.path.getsize(f) for f in files) / 1e6
    work = tempfile.mkdtemp(prefix="triad-tokenize-")
    model = os.path.join(work, "m")
    started = time.perf_counter()
    sentencepiece.SentencePieceTrainer.train(
        input=",".join(files), model_prefix=model, vocab_size=args.vocab,
        model_type="bpe", minloglevel=2, input_sentence_size=200000,
        shuffle_input_sentence=True)
    print(f"corpus: {len(files)} fortune files, {megabytes:.2f} MB; BPE model "
          f"of {args.vocab} pieces trained in {time.perf_counter() - started:.1f} s")

    def triad(extra, threads):
        best = None
        for _ in range(args.rounds):
            out = subprocess.run([tool, "--output", os.path.join(work, "t.bin"),
                                  "--threads", str(threads), *extra, *files],
                                 capture_output=True, text=True,
                                 check=True).stdout
            rate = float(re.search(r"\(([0-9.]+) MB/s", out).group(1))
            best = rate if best is None else max(best, rate)
        return best

    def python_rate():
        processor = sentencepiece.SentencePieceProcessor(
            model_file=model + ".model")
        best = None
        for _ in range(args.rounds):
            begin = time.perf_counter()
            for path in files:
                with open(path, encoding="utf-8", errors="replace") as f:
                    processor.encode(f.read())
            rate = megabytes / (time.perf_counter() - begin)
            best = rate if best is None else max(best, rate)
        return best

    cores = len(os.sched_getaffinity(0))
    byte_level = triad([], 1)
    spm_triad = triad(["--sentencepiece", model + ".model"], 1)
    spm_parallel = triad(["--sentencepiece", model + ".model"], cores)
    spm_python = python_rate()
    print(f"best of {args.rounds} rounds, MB of text per second:")
    print(f"  triad-data byte-level, 1 thread           {byte_level:8.1f}")
    print(f"  triad-data SentencePiece, 1 thread        {spm_triad:8.1f}")
    print(f"  triad-data SentencePiece, {cores} threads       {spm_parallel:8.1f}")
    print(f"  sentencepiece (Python), 1 thread          {spm_python:8.1f}")
    print(f"  triad-data / Python module, 1 thread      {spm_triad / spm_python:8.2f}")
    print(f"  triad-data {cores} threads / Python module    {spm_parallel / spm_python:8.2f}")


if __name__ == "__main__":
    main()
