#!/usr/bin/env python3
"""Checks a model or LoRA adapter exported by fblayout against transformers / peft.

    python python/check_export.py --model DIR --inputs FILE.safetensors [--tol 1e-4]
    python python/check_export.py --adapter ADAPTER_DIR --base BASE_DIR --inputs FILE.safetensors [--merge]

--model DIR is a Hugging Face model directory (config.json + model.safetensors, e.g. what
fblayout exports). --adapter is a peft adapter directory (adapter_config.json +
adapter_model.safetensors) and --base the model directory it applies to; both may be given in
one call (each is checked). The class comes from config.json's `architectures`:
*ForSequenceClassification -> AutoModelForSequenceClassification, *ForCausalLM / *LMHeadModel
-> AutoModelForCausalLM, anything else (BertModel, ...) -> AutoModel, compared on
last_hidden_state.

--inputs holds `input_ids`, `attention_mask` (and `token_type_ids` where the model takes them),
any integer dtype, [batch, seq], and the expected output under --key (default `logits`,
float32/float16/bfloat16). The script runs the forward in float32 on the CPU (eager attention)
and prints the largest absolute difference; it exits 1 when that exceeds --tol, 2 on a usage
error. --ignore-padding compares token-level outputs ([batch, seq, ...]) only where
attention_mask is 1 (what a padded query attends to is a convention). --merge also checks the
adapter merged into the base (peft's merge_and_unload), against the same expected output.

Its own test: the fixtures of python/make_fixtures.py hold the inputs and the logits of
transformers / peft, e.g.

    python python/check_export.py --model tests/fixtures/hf/gpt2/model --inputs tests/fixtures/hf/gpt2/full.safetensors
    python python/check_export.py --adapter tests/fixtures/hf/bert/lora_adapter --base tests/fixtures/hf/bert/model \\
        --inputs tests/fixtures/hf/bert/lora.safetensors --merge

fblayout's exports (fblayout_hf::export::model / ::adapter) of the fixtures are written by its tests
under FBLAYOUT_EXPORT_DIR (<arch>/full, <arch>/merged with the fixture's adapter merged in,
<arch>/adapter) and checked against the same files:

    FBLAYOUT_EXPORT_DIR=target/export cargo test -p fblayout-hf --test load export
    python python/check_export.py --model target/export/gpt2/full --inputs tests/fixtures/hf/gpt2/full.safetensors
    python python/check_export.py --model target/export/gpt2/merged --inputs tests/fixtures/hf/gpt2/lora.safetensors \\
        --key merged.logits
    python python/check_export.py --adapter target/export/gpt2/adapter --base tests/fixtures/hf/gpt2/model \\
        --inputs tests/fixtures/hf/gpt2/lora.safetensors --merge

A SEQ_CLS adapter with `modules_to_save` (the classifier trained in full; the trained one of
python/make_seq_cls_fixture.py, read and exported by the test
`a_seq_cls_adapter_with_modules_to_save_round_trips_exactly_in_peft_s_layout`; cargo runs it
in the crate's directory, so a relative FBLAYOUT_EXPORT_DIR lands under fblayout-hf/):

    python python/check_export.py --adapter fblayout-hf/target/export/bert/seq_cls_adapter \\
        --base tests/fixtures/hf/bert/model --inputs tests/fixtures/hf/bert/seq_cls/logits.safetensors --merge
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def auto_class(model_dir: Path):
    """The Auto class for config.json's first architecture, and what its output is compared on."""
    import transformers

    cfg = json.loads((model_dir / "config.json").read_text())
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else ""
    if arch.endswith("ForSequenceClassification"):
        return transformers.AutoModelForSequenceClassification, "logits", arch
    if arch.endswith("ForCausalLM") or arch.endswith("LMHeadModel"):
        return transformers.AutoModelForCausalLM, "logits", arch
    return transformers.AutoModel, "last_hidden_state", arch or "(no architectures: AutoModel)"


def load_base(model_dir: Path, attn: str):
    cls, output, arch = auto_class(model_dir)
    # No dtype argument (transformers 5 calls it dtype, 4.x torch_dtype): load, then float32.
    model = cls.from_pretrained(str(model_dir), attn_implementation=attn).float()
    model.eval()
    return model, output, arch


def model_inputs(model, tensors: dict) -> dict:
    """The inputs that the model's forward takes, as int64."""
    import inspect

    base = getattr(model, "get_base_model", lambda: model)()
    accepted = set(inspect.signature(base.forward).parameters)
    out = {}
    for name in INPUT_NAMES:
        if name in tensors and name in accepted:
            out[name] = tensors[name].to(torch.int64)
    if "input_ids" not in out:
        die("the inputs file has no input_ids")
    return out


def compare(label: str, model, output: str, tensors: dict, key: str, tol: float, ignore_padding: bool) -> bool:
    if key not in tensors:
        outputs = sorted(k for k in tensors if tensors[k].is_floating_point() and not k.startswith(("grad.", "after3.", "init.")))
        die(f"the inputs file has no tensor named {key!r} (its outputs: {', '.join(outputs)})")
    expected = tensors[key].to(torch.float32)
    inputs = model_inputs(model, tensors)
    with torch.no_grad():
        out = model(**inputs)
    got = getattr(out, output).to(torch.float32)
    if got.shape != expected.shape:
        print(f"FAIL {label}: {output} has shape {list(got.shape)}, {key!r} has {list(expected.shape)}")
        return False
    diff = (got - expected).abs()
    where = "all positions"
    if ignore_padding and "attention_mask" in tensors and diff.dim() >= 3:
        mask = tensors["attention_mask"].to(torch.bool)
        diff = diff[mask]
        where = f"{int(mask.sum())} unpadded positions"
    worst = diff.max().item() if diff.numel() else 0.0
    ok = worst <= tol and torch.isfinite(got).all().item()
    scale = expected.abs().max().item()
    print(
        f"{'ok  ' if ok else 'FAIL'} {label}: max |{output} - {key}| = {worst:.3e} over {where} "
        f"(tol {tol:g}; |{key}| up to {scale:.3g}; shape {list(got.shape)})"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description="Compare an exported model's / adapter's outputs with transformers and peft.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", type=Path, help="exported HF model directory (config.json + model.safetensors)")
    ap.add_argument("--adapter", type=Path, help="peft adapter directory (adapter_config.json + adapter_model.safetensors)")
    ap.add_argument("--base", type=Path, help="the base model directory the adapter applies to")
    ap.add_argument("--inputs", type=Path, required=True, help=".safetensors with input_ids, attention_mask[, token_type_ids] and the expected output")
    ap.add_argument("--key", default="logits", help="the expected output's tensor name in --inputs (default: logits)")
    ap.add_argument("--adapter-key", default=None, help="expected output for --adapter (default: the same as --key)")
    ap.add_argument("--merge-key", default=None, help="expected output for --merge (default: the adapter's)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed absolute difference (default 1e-4)")
    ap.add_argument("--merge", action="store_true", help="also check the adapter merged into the base (merge_and_unload)")
    ap.add_argument("--ignore-padding", action="store_true", help="compare token-level outputs only where attention_mask is 1")
    ap.add_argument("--attn", default="eager", help="attn_implementation (default eager)")
    args = ap.parse_args()
    if not args.model and not args.adapter:
        ap.error("give --model, or --adapter with --base, or both")
    if args.adapter and not args.base:
        ap.error("--adapter needs --base")
    for d, name in ((args.model, "config.json"), (args.base, "config.json"), (args.adapter, "adapter_config.json")):
        if d is not None and not (d / name).is_file():
            ap.error(f"{d} has no {name}")
    if not args.inputs.is_file():
        ap.error(f"{args.inputs} is not a file")
    quiet()
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))

    from safetensors.torch import load_file

    tensors = load_file(str(args.inputs))
    ok = True
    if args.model:
        model, output, arch = load_base(args.model, args.attn)
        ok &= compare(f"model {args.model} ({arch})", model, output, tensors, args.key, args.tol, args.ignore_padding)
    if args.adapter:
        from peft import PeftModel

        base, output, arch = load_base(args.base, args.attn)
        peft_model = PeftModel.from_pretrained(base, str(args.adapter))
        peft_model.eval()
        akey = args.adapter_key or args.key
        ok &= compare(f"adapter {args.adapter} on {args.base} ({arch})", peft_model, output, tensors, akey, args.tol, args.ignore_padding)
        if args.merge:
            merged = peft_model.merge_and_unload()
            merged.eval()
            ok &= compare("merged (merge_and_unload)", merged, output, tensors, args.merge_key or akey, args.tol, args.ignore_padding)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
