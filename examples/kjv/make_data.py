#!/usr/bin/env python3
"""Makes the default run's data and tokenizer from the King James Bible (public domain).

The text comes from Debian's `bible-kjv-text` package (its `bible` program prints verses; see
README.md for the commands). This script reads that program's unformatted output, one verse a
line with its reference first (`Ge1:1 In the beginning ...`), and writes next to itself:

- pretrain.txt    the narrative books of the pretraining, one verse a line, references dropped:
                  Genesis to Esther (the Law and the histories) and the Gospels and Acts
- pretrain.txt.gz the same, compressed (what the repository keeps; `gunzip -k` gives it back)
- proverbs.txt    the fine-tuning task: the Book of Proverbs, one verse a line
- model/tokenizer.json
                  a byte-level BPE tokenizer (tokenizers' BpeTrainer) of VOCAB entries trained
                  on pretrain.txt, with `<s>` (0), `</s>` (1) and `<pad>` (2) and `<s>` put before
                  each text, as Llama's tokenizers do

    python3 examples/kjv/make_data.py KJV_VERSES_FILE

Requires the `tokenizers` package (0.22 was used). The output is deterministic.
"""

import gzip
import re
import sys
from pathlib import Path

# The tokenizer's vocabulary: 256 bytes, 3 special tokens, the rest merges.
VOCAB = 512
# The books of the pretraining (as `bible` abbreviates them) and of the fine-tuning.
PRETRAIN = [
    "Ge", "Exo", "Lev", "Num", "Deu", "Josh", "Jdgs", "Ruth", "1Sm", "2Sm", "1Ki", "2Ki",
    "1Chr", "2Chr", "Ezra", "Neh", "Est", "Mat", "Mark", "Luke", "John", "Acts",
]
FINETUNE = ["Prv"]
SPECIALS = ["<s>", "</s>", "<pad>"]

HERE = Path(__file__).resolve().parent


def read_books(path: Path) -> dict:
    """The verses of each book, in order, from `bible -f`'s output."""
    books = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        ref, _, text = line.partition(" ")
        m = re.fullmatch(r"([0-9]?[A-Za-z]+)(\d+):(\d+)", ref)
        if m is None or not text.strip():
            sys.exit(f"{path}:{n}: not a verse (`Book1:1 text`): {line[:60]!r}")
        books.setdefault(m.group(1), []).append(text.strip())
    for b in PRETRAIN + FINETUNE:
        if b not in books:
            sys.exit(f"{path}: has no verses of {b}")
    return books


def write_lines(path: Path, lines: list) -> None:
    path.write_text("".join(l + "\n" for l in lines), encoding="utf-8")


def train_tokenizer(pretrain: Path, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(pretrain)], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2]
    tok.save(str(out))


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    books = read_books(Path(sys.argv[1]))
    pretrain = HERE / "pretrain.txt"
    write_lines(pretrain, [v for b in PRETRAIN for v in books[b]])
    # mtime 0: the same bytes on every run.
    (HERE / "pretrain.txt.gz").write_bytes(gzip.compress(pretrain.read_bytes(), 9, mtime=0))
    write_lines(HERE / "proverbs.txt", [v for b in FINETUNE for v in books[b]])
    (HERE / "model").mkdir(exist_ok=True)
    train_tokenizer(pretrain, HERE / "model" / "tokenizer.json")


if __name__ == "__main__":
    main()
