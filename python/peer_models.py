#!/usr/bin/env python3
"""The PyTorch peer of fblayout's `bench_models` (issue 19, item 6): fine-tuning steps of
Hugging Face models in transformers (+ peft), timed on the same shapes.

Workloads (random weights: timing does not depend on their values):

- minilm: `BertForSequenceClassification` with all-MiniLM-L6-v2's shapes (6 layers, hidden
  384, 12 heads, intermediate 1536, vocabulary 30 522, 512 positions, LayerNorm eps 1e-12,
  GELU) and 2 labels, batch 32 x 128 tokens, every token attended (mask of ones), one label per
  sequence;
- llama: `LlamaForCausalLM` with SmolLM-135M's shapes but an untied head (30 layers, hidden
  576, 9 heads, 3 key/value heads, intermediate 1536, vocabulary 49 152, RMSNorm eps 1e-5),
  batch 8 x 512 tokens, next-token loss on random ids.

Each runs fully fine-tuned and with LoRA (peft: r 8, alpha 16, dropout 0, the query and value
projections; everything else frozen), with AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 0.01) over the trainable parameters. Variants (--variants):

    fp32          eager, float32, TF32 off
    tf32          eager, TF32 matmuls
    fp16          eager, autocast float16 + GradScaler, SDPA attention
    bf16          eager, autocast bfloat16, SDPA attention
    compile-fp16  torch.compile of the model, autocast float16 + GradScaler, SDPA

One step = zero grads, forward + loss, backward, optimizer step, the loss read back (as
bench_models does). Reported: the median wall time of --steps steps after --warmup, tokens per
second, torch.cuda.max_memory_allocated over the variant, and the first step's time
(compilation included).

    python python/peer_models.py                       # both models, every variant, on CUDA
    python python/peer_models.py --device cpu --small --variants fp32   # a smoke test
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
import traceback

import torch

VARIANTS = {
    "fp32": {"amp": None, "tf32": False, "compile": False},
    "tf32": {"amp": None, "tf32": True, "compile": False},
    "fp16": {"amp": "float16", "tf32": False, "compile": False},
    "bf16": {"amp": "bfloat16", "tf32": False, "compile": False},
    "compile-fp16": {"amp": "float16", "tf32": False, "compile": True},
}


def make_model(kind: str, small: bool):
    from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

    if kind == "minilm":
        dims = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    vocab_size=500) if small else dict(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, vocab_size=30522)
        config = BertConfig(max_position_embeddings=512, layer_norm_eps=1e-12, hidden_act="gelu", num_labels=2,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="sdpa",
                            **dims)
        return BertForSequenceClassification(config), (2, 16) if small else (32, 128), ["query", "value"]
    dims = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, vocab_size=500) if small else dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, vocab_size=49152)
    config = LlamaConfig(rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=2048,
                         attn_implementation="sdpa", **dims)
    return LlamaForCausalLM(config), (2, 16) if small else (8, 512), ["q_proj", "v_proj"]


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def run(kind: str, lora: bool, name: str, spec: dict, args, device: torch.device) -> dict:
    row = {"model": kind, "tuning": "lora" if lora else "full", "variant": name}
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        set_tf32(spec["tf32"])
    if spec["compile"]:
        torch._dynamo.reset()
    torch.manual_seed(args.seed)
    model, (batch, seq), targets = make_model(kind, args.small)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets))
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    row["trainable"] = sum(p.numel() for p in trainable)
    opt = torch.optim.AdamW(trainable, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    if kind == "minilm":
        inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                      labels=torch.randint(0, 2, (batch,), device=device))
    else:
        inputs = dict(input_ids=ids, labels=ids)
    fwd = torch.compile(model) if spec["compile"] else model
    amp = getattr(torch, spec["amp"]) if spec["amp"] else None
    scaler = torch.amp.GradScaler(device.type) if spec["amp"] == "float16" else None

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=amp, enabled=amp is not None):
            loss = fwd(**inputs).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    t = time.perf_counter()
    first = step().item()
    row["first_step_s"] = time.perf_counter() - t
    row["first_loss"] = first
    if not math.isfinite(first):
        raise RuntimeError(f"the first step's loss is {first}")
    for _ in range(args.warmup):
        step()
    wall = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step().item()
        wall.append((time.perf_counter() - t) * 1e3)
    row["step_ms"] = statistics.median(wall)
    row["tokens_per_s"] = batch * seq / (row["step_ms"] / 1e3)
    row["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    row["shape"] = f"{batch} x {seq}"
    return row


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", choices=["minilm", "llama", "both"], default="both")
    ap.add_argument("--tuning", choices=["full", "lora", "both"], default="both")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--small", action="store_true", help="tiny shapes, for a smoke test")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}",
          flush=True)
    kinds = ["minilm", "llama"] if args.model == "both" else [args.model]
    tunings = [False, True] if args.tuning == "both" else [args.tuning == "lora"]
    rows = []
    for kind in kinds:
        for lora in tunings:
            for name in args.variants.split(","):
                spec = VARIANTS[name]
                try:
                    row = run(kind, lora, name, spec, args, device)
                    row["status"] = "ok"
                except Exception as e:  # a variant that fails is reported, the rest still run
                    traceback.print_exc()
                    row = {"model": kind, "tuning": "lora" if lora else "full", "variant": name,
                           "status": f"failed: {type(e).__name__}"}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| model | tuning | variant | status | shape | trainable | step ms (median) | tokens/s | peak MiB | first step s |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['tuning']} | {r['variant']} | {r['status']} | {r.get('shape', '-')} | "
              f"{r.get('trainable', '-')} | {fmt(r.get('step_ms'), '.2f')} | {fmt(r.get('tokens_per_s'), '.0f')} | "
              f"{fmt(r.get('peak_mib'), '.0f')} | {fmt(r.get('first_step_s'), '.1f')} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
