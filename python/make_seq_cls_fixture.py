#!/usr/bin/env python3
"""A trained peft SEQ_CLS LoRA adapter of the tiny BERT fixture, and peft's logits with it.

    python python/make_seq_cls_fixture.py            # writes tests/fixtures/hf/bert/seq_cls/
    python python/make_seq_cls_fixture.py --check    # regenerates in a temp dir, compares

Starts from what python/make_fixtures.py wrote for bert (`model/`, the initial adapter
`lora_adapter/` and the batch of `lora.safetensors`), loads them with transformers + peft
(`PeftModel.from_pretrained(..., is_trainable=True)`: LoRA on `query` and `value`, and the
classifier in `modules_to_save`, trained in full), trains 3 AdamW steps (fixture.json's
optimizer) and saves the adapter with peft's `save_pretrained`. The classifier then differs
from the base model's, so a reader that ignored `modules_to_save` would get other logits.

    tests/fixtures/hf/bert/seq_cls/adapter/            adapter_config.json + adapter_model.safetensors (peft's)
    tests/fixtures/hf/bert/seq_cls/logits.safetensors  input_ids, attention_mask, token_type_ids, labels,
                                                       logits [3, 3] and loss [1] of the trained adapter
                                                       (peft's eval forward, float32, eager attention)

adapter_config.json is reduced to the keys every peft since 0.10 reads, as make_fixtures.py
does (portable_adapter_config).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402

BERT = mf.REPO / "tests" / "fixtures" / "hf" / "bert"


def make(out: Path) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import BertForSequenceClassification

    mf.quiet()
    mf.deterministic(mf.SEED)
    batch_all = load_file(str(BERT / "lora.safetensors"))
    batch = {k: batch_all[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    base = BertForSequenceClassification.from_pretrained(str(BERT / "model"), attn_implementation="eager").float()
    model = PeftModel.from_pretrained(base, str(BERT / "lora_adapter"), is_trainable=True)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert any("modules_to_save" in n for n, _ in named), "the classifier is trained in full"
    model.train()
    mf.train(model, batch, named)
    model.eval()
    with torch.no_grad():
        logits, loss = mf.forward(model, batch)
    adapter = out / "adapter"
    model.save_pretrained(str(adapter), safe_serialization=True)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps(mf.portable_adapter_config(cfg), indent=2, sort_keys=True) + "\n")
    for extra in adapter.iterdir():
        if extra.name not in ("adapter_config.json", "adapter_model.safetensors"):
            extra.unlink()
    tensors = dict(batch)
    tensors["logits"] = logits.detach().contiguous()
    tensors["loss"] = mf.scalar(loss)
    mf.save_tensors(tensors, out / "logits.safetensors", {"kind": "seq_cls", "loss": f"{loss.item():.6f}"})
    # The trained classifier is not the base's.
    saved = load_file(str(adapter / "adapter_model.safetensors"))
    initial = load_file(str(BERT / "model" / "model.safetensors"))
    assert not torch.equal(saved["base_model.model.classifier.weight"], initial["classifier.weight"])
    print(f"bert SEQ_CLS adapter trained 3 steps: loss {loss.item():.6f}; keys {sorted(saved)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare with the committed files")
    args = ap.parse_args()
    torch.set_num_threads(1)
    target = BERT / "seq_cls"
    if not args.check:
        make(target)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        make(Path(tmp))
        names = ["adapter/adapter_config.json", "adapter/adapter_model.safetensors", "logits.safetensors"]
        _, mismatch, errors = filecmp.cmpfiles(tmp, target, names, shallow=False)
        if mismatch or errors:
            print(f"differ: {mismatch + errors}")
            return 1
    print("the committed SEQ_CLS fixture is what this script writes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
