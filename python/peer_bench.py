#!/usr/bin/env python3
"""The PyTorch peer of fblayout's `bench_train` (issue 21): the same training step, timed.

The model is fblayout's (fblayout-plan/src/models.rs), written in PyTorch:

- token ids and positions [batch, seq] -> token embedding [vocab, hidden] + position embedding
  [seq, hidden] (the position table has `seq` rows, as bench_train builds it);
- encoder (BERT-style): LayerNorm after the embeddings, then post-LN blocks
  x = LN(x + attn(x)); x = LN(x + FFN(x)), bidirectional attention;
- decoder (GPT-style): pre-LN blocks x = x + attn(LN(x)); x = x + FFN(LN(x)), causal
  attention, a final LayerNorm;
- attention: one fused QKV projection (hidden -> 3 hidden, with bias; columns q | k | v, heads
  contiguous), softmax(q k^T / sqrt(head_dim)) v, an output projection with bias;
- FFN: hidden -> ffn (bias), GELU (erf), ffn -> hidden (bias); LayerNorm eps 1e-5;
- LM head over the vocabulary: with a bias in the encoder, without one in the decoder (as in
  models.rs), untied; cross-entropy against random labels, mean over every token;
- AdamW over every parameter with fblayout's defaults (PyTorch's): lr 1e-3, betas (0.9, 0.999),
  eps 1e-8, weight decay 0.01.

Parameters are drawn like fblayout's executor does (exec/init.rs): linear weights
U(-1/sqrt(fan_in), 1/sqrt(fan_in)), embeddings U(-1, 1), LayerNorm gamma U(0.8, 1.2), biases
and beta U(-0.1, 0.1); ids and labels are uniform below the vocabulary size, positions 0..seq-1.
The distributions match, the random streams do not: first losses agree in size, not in bits.

One step = zero grads, forward + loss, backward, optimizer step, and reading the loss back to
the host (bench_train reads the loss back every step too). Variants (--variants):

    fp32          eager, float32, TF32 off, attention materialised (matmul, softmax, matmul)
    tf32          eager, float32 weights, TF32 matmuls, attention materialised
    fp16-math     eager, autocast float16 + GradScaler (dynamic loss scaling), attention materialised
    fp16-sdpa     eager, autocast float16 + GradScaler, F.scaled_dot_product_attention
    bf16-math     eager, autocast bfloat16, attention materialised
    bf16-sdpa     eager, autocast bfloat16, F.scaled_dot_product_attention
    compile-fp16  torch.compile of the model (forward + loss), autocast float16 + GradScaler, SDPA
    compile-tf32  torch.compile of the model (forward + loss), TF32 matmuls, SDPA

Autocast keeps float32 master weights and AdamW state (as fblayout's mixed precision does).
For each variant: cold start (the first step, compilation included; setup is reported apart),
then --warmup steps, then --steps timed steps: the median wall time of a step (synchronised,
loss read back), the median CUDA-event time of a step, the mean time of --steps steps run back
to back with one synchronisation at the end ("pipelined"), and the peak of
torch.cuda.max_memory_allocated over the variant.

    python python/peer_bench.py                                  # defaults: both models, MiniLM-sized
    python python/peer_bench.py --model encoder --variants fp32,bf16-sdpa --json out.json
    python python/peer_bench.py --device cpu --batch 2 --seq 16 --layers 1 --hidden 32 \\
        --heads 4 --ffn 64 --vocab 100                           # a smoke test without a GPU

On the CPU the variants that need CUDA (TF32, float16 with a GradScaler, torch.compile) are
skipped with a line saying so, unless --cpu-all.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANTS = {
    "fp32": {"amp": None, "tf32": False, "attn": "math", "compile": False},
    "tf32": {"amp": None, "tf32": True, "attn": "math", "compile": False},
    "fp16-math": {"amp": "float16", "tf32": False, "attn": "math", "compile": False},
    "fp16-sdpa": {"amp": "float16", "tf32": False, "attn": "sdpa", "compile": False},
    "bf16-math": {"amp": "bfloat16", "tf32": False, "attn": "math", "compile": False},
    "bf16-sdpa": {"amp": "bfloat16", "tf32": False, "attn": "sdpa", "compile": False},
    "compile-fp16": {"amp": "float16", "tf32": False, "attn": "sdpa", "compile": True},
    "compile-tf32": {"amp": None, "tf32": True, "attn": "sdpa", "compile": True},
}

EPS = 1e-5  # fblayout's LayerNorm epsilon (models.rs)
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}  # AdamW::default()


def needs_cuda(spec: dict) -> str | None:
    """Why a variant needs CUDA, or None."""
    if spec["tf32"]:
        return "TF32 is a CUDA matmul mode"
    if spec["amp"] == "float16":
        return "float16 autocast with a GradScaler is a CUDA recipe"
    if spec["compile"]:
        return "torch.compile is benchmarked on the GPU (Triton)"
    return None


# --------------------------------------------------------------------------------------------
# The model


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool, kind: str):
        super().__init__()
        self.heads, self.causal, self.kind = heads, causal, kind
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self._masks: dict = {}

    def future(self, t: int, device: torch.device) -> torch.Tensor:
        """The causal mask (True above the diagonal), made once per length and device."""
        key = (t, str(device))
        if key not in self._masks:
            self._masks[key] = torch.ones(t, t, dtype=torch.bool, device=device).triu(1)
        return self._masks[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        d = h // self.heads
        qkv = self.qkv(x).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [b, heads, t, d]
        if self.kind == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
            if self.causal:
                scores = scores.masked_fill(self.future(t, x.device), float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            ctx = torch.matmul(probs.to(v.dtype), v)
        return self.out(ctx.transpose(1, 2).reshape(b, t, h))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.up = nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, model: str, hidden: int, heads: int, ffn: int, attn: str):
        super().__init__()
        self.pre_ln = model == "decoder"
        self.attn = Attention(hidden, heads, causal=self.pre_ln, kind=attn)
        self.ln1 = nn.LayerNorm(hidden, eps=EPS)
        self.ffn = FeedForward(hidden, ffn)
        self.ln2 = nn.LayerNorm(hidden, eps=EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:  # GPT
            x = x + self.attn(self.ln1(x))
            return x + self.ffn(self.ln2(x))
        x = self.ln1(x + self.attn(x))  # BERT
        return self.ln2(x + self.ffn(x))


class Transformer(nn.Module):
    """fblayout's encoder or decoder; forward returns the mean cross-entropy."""

    def __init__(self, model: str, vocab: int, max_positions: int, hidden: int, heads: int, ffn: int, layers: int, attn: str):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.model = model
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_positions, hidden)
        self.embed_ln = nn.LayerNorm(hidden, eps=EPS) if model == "encoder" else None
        self.blocks = nn.ModuleList(Block(model, hidden, heads, ffn, attn) for _ in range(layers))
        self.final_ln = nn.LayerNorm(hidden, eps=EPS) if model == "decoder" else None
        self.head = nn.Linear(hidden, vocab, bias=model == "encoder")

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(positions)
        if self.embed_ln is not None:
            x = self.embed_ln(x)
        for blk in self.blocks:
            x = blk(x)
        if self.final_ln is not None:
            x = self.final_ln(x)
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


@torch.no_grad()
def init_like_fblayout(model: nn.Module, gen: torch.Generator) -> None:
    """fblayout's exec/init.rs distributions (not its random stream)."""

    def uniform(p: torch.Tensor, lo: float, hi: float) -> None:
        p.copy_(torch.rand(p.shape, generator=gen) * (hi - lo) + lo)

    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            bound = 1.0 / math.sqrt(mod.in_features)
            uniform(mod.weight, -bound, bound)
            if mod.bias is not None:
                uniform(mod.bias, -0.1, 0.1)
        elif isinstance(mod, nn.Embedding):
            uniform(mod.weight, -1.0, 1.0)
        elif isinstance(mod, nn.LayerNorm):
            uniform(mod.weight, 0.8, 1.2)
            uniform(mod.bias, -0.1, 0.1)


# --------------------------------------------------------------------------------------------
# Timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def make_adamw(params, impl: str):
    kw = dict(ADAMW)
    if impl == "foreach":
        kw["foreach"] = True
    elif impl == "fused":
        kw["fused"] = True
    elif impl == "for-loop":
        kw["foreach"] = False
    return torch.optim.AdamW(params, **kw)


def grad_scaler(device: torch.device):
    try:
        return torch.amp.GradScaler(device.type)
    except (AttributeError, TypeError):  # torch < 2.3
        return torch.cuda.amp.GradScaler()


def run_variant(name: str, spec: dict, model_kind: str, args, device: torch.device) -> dict:
    """Builds the model for `spec`, runs it and returns its measurements."""
    row = {"variant": name, "model": model_kind, **{k: spec[k] for k in ("amp", "tf32", "attn", "compile")}}
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    if spec["compile"]:
        torch._dynamo.reset()
    set_tf32(spec["tf32"]) if device.type == "cuda" else None

    t_setup = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)
    model = Transformer(model_kind, args.vocab, args.seq, args.hidden, args.heads, args.ffn, args.layers, spec["attn"])
    init_like_fblayout(model, gen)
    model.to(device)
    opt = make_adamw(model.parameters(), args.adamw)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)
    positions = torch.arange(args.seq).repeat(args.batch, 1).to(device)
    fwd = model
    if spec["compile"]:
        fwd = torch.compile(model, mode=args.compile_mode) if args.compile_mode else torch.compile(model)
    amp_dtype = getattr(torch, spec["amp"]) if spec["amp"] else None
    scaler = grad_scaler(device) if spec["amp"] == "float16" else None
    sync(device)
    row["setup_s"] = time.perf_counter() - t_setup
    row["params"] = sum(p.numel() for p in model.parameters())

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        if amp_dtype is not None:
            with torch.autocast(device_type=device.type, dtype=amp_dtype):
                loss = fwd(ids, positions, labels)
        else:
            loss = fwd(ids, positions, labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    t0 = time.perf_counter()
    first = step().item()
    row["cold_start_s"] = time.perf_counter() - t0
    row["first_loss"] = first
    if not math.isfinite(first):
        raise RuntimeError(f"the first step's loss is {first}")
    for _ in range(args.warmup):
        step()
    sync(device)

    wall, events = [], []
    for _ in range(args.steps):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t = time.perf_counter()
        step().item()  # the loss is read back every step, as bench_train does
        if device.type == "cuda":
            e1.record()
            e1.synchronize()
            events.append(e0.elapsed_time(e1))
        wall.append((time.perf_counter() - t) * 1e3)
    sync(device)
    t = time.perf_counter()
    for _ in range(args.steps):
        last = step()
    last = last.item()
    row["pipelined_ms"] = (time.perf_counter() - t) * 1e3 / args.steps

    row["step_ms"] = statistics.median(wall)
    row["step_ms_min"] = min(wall)
    row["gpu_ms"] = statistics.median(events) if events else None
    row["tokens_per_s"] = args.batch * args.seq / (row["step_ms"] / 1e3)
    row["last_loss"] = last
    row["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    if scaler is not None:
        row["loss_scale"] = float(scaler.get_scale())
    return row  # the model, optimizer and inputs go with this frame (collected before the next variant)


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list) -> str:
    lines = [
        "| model | variant | status | step ms (median) | GPU ms (events) | pipelined ms | tokens/s | peak MiB | cold start s | setup s | first loss |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['status']} | {fmt(r.get('step_ms'), '.3f')} | {fmt(r.get('gpu_ms'), '.3f')} | "
            f"{fmt(r.get('pipelined_ms'), '.3f')} | {fmt(r.get('tokens_per_s'), '.0f')} | {fmt(r.get('peak_mib'), '.0f')} | "
            f"{fmt(r.get('cold_start_s'), '.2f')} | {fmt(r.get('setup_s'), '.2f')} | {fmt(r.get('first_loss'), '.5f')} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description="PyTorch peer of fblayout's bench_train: one training step, timed.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="variants: " + ", ".join(VARIANTS))
    ap.add_argument("--model", choices=["encoder", "decoder", "both"], default="both")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=10, help="steps run after the first and before timing")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list (default: all)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--adamw", choices=["default", "foreach", "fused", "for-loop"], default="default",
                    help="torch.optim.AdamW's implementation (default: PyTorch's choice, foreach on CUDA)")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: PyTorch's default)")
    ap.add_argument("--cpu-all", action="store_true", help="on the CPU, run the variants that need CUDA too")
    args = ap.parse_args()

    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.hidden % args.heads:
        ap.error(f"hidden {args.hidden} is not a multiple of heads {args.heads}")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    models = ["encoder", "decoder"] if args.model == "both" else [args.model]

    meta = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "cpu_threads": torch.get_num_threads(),
        "shape": {k: getattr(args, k) for k in ("batch", "seq", "layers", "hidden", "heads", "ffn", "vocab")},
        "steps": args.steps,
        "warmup": args.warmup,
        "adamw": {**ADAMW, "betas": list(ADAMW["betas"]), "impl": args.adamw},
        "compile_mode": args.compile_mode,
        "seed": args.seed,
    }
    print(f"torch {meta['torch']} (CUDA {meta['cuda']}), device {args.device}: {meta['device']}")
    print(
        f"shape: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, FFN {args.ffn}, vocabulary {args.vocab}, "
        f"batch {args.batch} x seq {args.seq}; {args.warmup} warm-up and {args.steps} timed steps"
    )
    rows = []
    failed = 0
    for m in models:
        for name in names:
            spec = VARIANTS[name]
            why = needs_cuda(spec)
            if device.type == "cpu" and why and not args.cpu_all:
                print(f"skip {m} {name}: needs CUDA ({why}); this run is on the CPU")
                rows.append({"variant": name, "model": m, "status": f"skipped: needs CUDA ({why})"})
                continue
            try:
                row = run_variant(name, spec, m, args, device)
                row["status"] = "ok"
                print(
                    f"{m} {name}: step {row['step_ms']:.3f} ms (median of {args.steps}), GPU {fmt(row['gpu_ms'], '.3f')} ms, "
                    f"pipelined {row['pipelined_ms']:.3f} ms, peak {fmt(row['peak_mib'], '.0f')} MiB, "
                    f"cold start {row['cold_start_s']:.2f} s, loss {row['first_loss']:.5f} -> {row['last_loss']:.5f}"
                )
            except Exception as e:  # noqa: BLE001 - one variant's failure (an OOM, say) doesn't stop the others
                failed += 1
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"error {m} {name}: {msg}")
                traceback.print_exc(file=sys.stderr)
                row = {"variant": name, "model": m, "status": f"error: {msg}"}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
    print()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
