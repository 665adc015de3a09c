"""Trains a small byte-level BPE tokenizer (400 ids, <|endoftext|> first)
with Hugging Face's tokenizers: TEXT OUTPUT_JSON."""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=400, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tokenizer.train([sys.argv[1]], trainer)
tokenizer.save(sys.argv[2])
