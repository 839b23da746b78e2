#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints and parity fixtures for fblayout's model loaders.

How the committed fixtures were made (from the repository root):

    python python/make_fixtures.py            # writes tests/fixtures/hf/{bert,gpt2,llama}/
    python python/make_fixtures.py --check    # regenerates in a temp dir, compares with the committed ones

with torch 2.15.0 (CPU), transformers 5.25.0, peft 0.21.2, safetensors 0.8.0 and tokenizers
0.23.3 (the code also runs on transformers 4.4x / peft 0.13+). Everything is float32 on the CPU,
one thread, `torch.use_deterministic_algorithms(True)`, seeds fixed below (SEED = 1234, one
seed per architecture derived from it), eager attention (`attn_implementation="eager"`).
Re-running the script rewrites the same files (bit-identical on the same versions; other
versions of torch may change the last bits of the float results).

What is written, for each ARCH in bert, gpt2, llama (see python/README.md for every tensor):

    tests/fixtures/hf/ARCH/model/config.json          the HF config (save_pretrained)
    tests/fixtures/hf/ARCH/model/model.safetensors    the random initial weights (save_pretrained)
    tests/fixtures/hf/ARCH/model/tokenizer.json       a tiny tokenizer trained on TEXT below
    tests/fixtures/hf/ARCH/full.safetensors           inputs, logits, loss, grads, weights after 3 AdamW steps
    tests/fixtures/hf/ARCH/lora_adapter/              the initial LoRA adapter (peft save_pretrained)
    tests/fixtures/hf/ARCH/lora.safetensors           the same for LoRA, plus the merged model's logits
    tests/fixtures/hf/ARCH/fixture.json               settings, conventions, shapes, versions

Conventions (HF's, which the fixtures keep unchanged):

- Weight orientation. `nn.Linear` weights (BERT, Llama, every LoRA A/B) are `[out, in]`
  (y = x W^T + b). GPT-2's `Conv1D` weights (`c_attn`, `c_proj`, `c_fc`) are `[in, out]`
  (y = x W + b). GPT-2's `c_attn` is the fused QKV projection: output columns are
  q (0..h), k (h..2h), v (2h..3h), heads contiguous inside each.
- GPT-2 ties `lm_head.weight` to `transformer.wte.weight`: the checkpoint and the grads hold
  `transformer.wte.weight` only (its gradient is the sum of both uses). Llama here is untied
  (`lm_head.weight` is its own parameter).
- Llama's q_proj/k_proj rows are in HF's rotate-half RoPE order (pairs (i, i + head_dim/2)
  inside each head), not interleaved. rope_theta = 5000.0; the config has both
  `rope_parameters` (transformers 5) and a top-level `rope_theta` (transformers 4).
- Positions are 0..seq-1 in every row (HF's default when no position_ids are given); padding
  is on the right, so real tokens always sit at positions 0..len-1.
- Losses are the models' own. BERT sequence classification: mean cross-entropy over the
  batch on the pooled [CLS] output. Causal LM: logits at position t predict labels[t + 1]
  (HF shifts inside the model), mean over positions whose shifted label is not -100.
- AdamW is torch.optim.AdamW (decoupled decay, p <- p - lr * (m_hat / (sqrt(v_hat) + eps)
  + wd * p)), weight decay on every trainable parameter, the same batch each step.
"""

from __future__ import annotations

import argparse
import copy
import filecmp
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "hf"

SEED = 1234
ARCH_SEED = {"bert": SEED + 1, "gpt2": SEED + 2, "llama": SEED + 3}

ADAMW = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}
STEPS = 3

LORA = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0}
LORA_TARGETS = {"bert": ["query", "value"], "gpt2": ["c_attn"], "llama": ["q_proj", "v_proj"]}
LORA_STD = 0.1  # lora_A and lora_B are redrawn from N(0, LORA_STD^2) after creation (peft starts B at 0)

MAX_LEN = {"bert": 10, "gpt2": 12, "llama": 12}

# The opening of "Alice's Adventures in Wonderland" (Lewis Carroll, 1865; public domain).
TEXT = [
    "Alice was beginning to get very tired of sitting by her sister on the bank,",
    "and of having nothing to do: once or twice she had peeped into the book her sister",
    "was reading, but it had no pictures or conversations in it,",
    "'and what is the use of a book,' thought Alice 'without pictures or conversations?'",
    "So she was considering in her own mind (as well as she could, for the hot day made her",
    "feel very sleepy and stupid), whether the pleasure of making a daisy-chain would be",
    "worth the trouble of getting up and picking the daisies, when suddenly a White Rabbit",
    "with pink eyes ran close by her.",
    "There was nothing so very remarkable in that; nor did Alice think it so very much out",
    "of the way to hear the Rabbit say to itself, 'Oh dear! Oh dear! I shall be late!'",
]

# The batch: three rows of different lengths (right padding). For BERT the first row is a
# sentence pair, so its second segment has token_type_ids 1.
BATCH_TEXT = {
    "bert": [
        ("Alice was tired of sitting", "by her sister on the bank"),
        "The White Rabbit ran by her",
        "Oh dear!",
    ],
    "decoder": [
        "Alice was beginning to get very tired of sitting",
        "So she was considering",
        "Oh dear!",
    ],
}
BERT_LABELS = [2, 0, 1]
# One real (non-padding) position also ignored in the decoders' labels: (row, position).
EXTRA_IGNORED = (1, 3)


# --------------------------------------------------------------------------------------------
# Determinism and small helpers


def quiet() -> None:
    """No progress bars or advisory warnings from transformers/peft in the output."""
    import warnings

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def deterministic(seed: int) -> None:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def versions() -> dict:
    import peft
    import safetensors
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "safetensors": safetensors.__version__,
        "tokenizers": tokenizers.__version__,
    }


def scalar(x: torch.Tensor) -> torch.Tensor:
    """A loss as a float32 tensor of shape [1] (simplest for any safetensors loader)."""
    return x.detach().reshape(1).to(torch.float32).clone()


def save_tensors(tensors: dict, path: Path, metadata: dict) -> None:
    from safetensors.torch import save_file

    clean = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    # One metadata entry: safetensors writes several in a random order, and the files are
    # meant to be byte-identical from run to run.
    save_file(clean, str(path), metadata={"fixture": " ".join(f"{k}={v}" for k, v in metadata.items())})


def describe(tensors: dict) -> dict:
    return {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)} for k, v in tensors.items()}


# --------------------------------------------------------------------------------------------
# Tokenizers


def train_tokenizer(arch: str):
    """A tiny tokenizer trained on TEXT: WordPiece (BERT-style, lowercased) or byte-level BPE."""
    from tokenizers import processors
    from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

    if arch == "bert":
        # The WordPiece trainer of tokenizers breaks ties differently from run to run, so the
        # vocabulary is built here instead, deterministically: the special tokens, every
        # character alone and as a "##" continuation, then whole words by falling count
        # (ties alphabetical), up to 256 entries.
        probe = BertWordPieceTokenizer(lowercase=True)
        counts: dict = {}
        for line in TEXT:
            norm = probe.normalizer.normalize_str(line)
            for word, _ in probe.pre_tokenizer.pre_tokenize_str(norm):
                counts[word] = counts.get(word, 0) + 1
        chars = sorted({c for w in counts for c in w})
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
        for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(vocab) >= 256:
                break
            if word not in vocab:
                vocab.append(word)
        tok = BertWordPieceTokenizer({w: i for i, w in enumerate(vocab)}, lowercase=True)
        tok.post_processor = processors.BertProcessing(
            ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
        )
        specials = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    elif arch == "gpt2":
        tok = ByteLevelBPETokenizer(add_prefix_space=False)
        tok.train_from_iterator(TEXT, vocab_size=320, min_frequency=1, special_tokens=["<|endoftext|>"], show_progress=False)
        specials = {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "pad": "<|endoftext|>"}
    else:
        tok = ByteLevelBPETokenizer(add_prefix_space=False)
        tok.train_from_iterator(TEXT, vocab_size=320, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>"], show_progress=False)
        bos = tok.token_to_id("<s>")
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
        specials = {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}
    ids = {k: tok.token_to_id(v) for k, v in specials.items()}
    return tok, specials, ids


def encode_batch(arch: str, tok, pad_id: int) -> dict:
    """The padded batch: input_ids, attention_mask (and token_type_ids for BERT), int64."""
    tok.enable_truncation(MAX_LEN[arch])
    tok.enable_padding(direction="right", pad_id=pad_id, pad_token=tok.id_to_token(pad_id))
    texts = BATCH_TEXT["bert" if arch == "bert" else "decoder"]
    enc = tok.encode_batch(texts)
    tok.no_truncation()
    tok.no_padding()
    batch = {
        "input_ids": torch.tensor([e.ids for e in enc], dtype=torch.int64),
        "attention_mask": torch.tensor([e.attention_mask for e in enc], dtype=torch.int64),
    }
    if arch == "bert":
        batch["token_type_ids"] = torch.tensor([e.type_ids for e in enc], dtype=torch.int64)
    lengths = batch["attention_mask"].sum(1).tolist()
    assert len(set(lengths)) == len(lengths), f"{arch}: rows should differ in length, got {lengths}"
    assert max(lengths) == batch["input_ids"].shape[1]
    if arch == "bert":
        batch["labels"] = torch.tensor(BERT_LABELS, dtype=torch.int64)
        assert batch["token_type_ids"].sum() > 0
    else:
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        r, p = EXTRA_IGNORED
        assert batch["attention_mask"][r, p] == 1
        labels[r, p] = -100
        batch["labels"] = labels
    return batch, [list(e.tokens) for e in enc]


# --------------------------------------------------------------------------------------------
# Models


def make_config(arch: str, vocab: int, ids: dict):
    from transformers import BertConfig, GPT2Config, LlamaConfig

    if arch == "bert":
        return BertConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            max_position_embeddings=32,
            type_vocab_size=2,
            layer_norm_eps=1e-12,
            initializer_range=0.02,
            num_labels=3,
            pad_token_id=ids["pad"],
            classifier_dropout=None,
            architectures=["BertForSequenceClassification"],
            attn_implementation="eager",
        )
    if arch == "gpt2":
        return GPT2Config(
            vocab_size=vocab,
            n_positions=32,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_inner=None,  # 4 * n_embd, as GPT-2
            activation_function="gelu_new",
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
            initializer_range=0.02,
            bos_token_id=ids["bos"],
            eos_token_id=ids["eos"],
            pad_token_id=ids["pad"],
            tie_word_embeddings=True,
            architectures=["GPT2LMHeadModel"],
            attn_implementation="eager",
        )
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=176,  # 2.75 * hidden
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=32,
        rms_norm_eps=1e-6,
        rope_theta=5000.0,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        initializer_range=0.02,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        architectures=["LlamaForCausalLM"],
        attn_implementation="eager",
    )


def model_class(arch: str):
    from transformers import BertForSequenceClassification, GPT2LMHeadModel, LlamaForCausalLM

    return {"bert": BertForSequenceClassification, "gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}[arch]


def forward(model, batch: dict):
    kwargs = {k: v for k, v in batch.items()}
    out = model(**kwargs)
    return out.logits, out.loss


def reinit_small(model, arch: str) -> None:
    """Redraws every parameter with a seeded generator so the values don't depend on how a
    transformers version initialises (norm weights around 1, biases and the rest around 0)."""
    gen = torch.Generator().manual_seed(ARCH_SEED[arch] * 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm = "LayerNorm" in name or ".ln_" in name or "norm" in name
            if p.dim() == 1 and is_norm and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))


# The adapter_config.json keys that every peft since 0.10 reads; the others peft 0.21 writes
# hold their defaults and are dropped, so that older peft versions (which reject keys they
# don't know) load the adapter too.
ADAPTER_KEYS = [
    "peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias",
    "fan_in_fan_out", "modules_to_save", "init_lora_weights", "use_rslora", "use_dora",
    "inference_mode", "base_model_name_or_path", "revision", "layers_to_transform",
    "layers_pattern", "rank_pattern", "alpha_pattern",
]
ADAPTER_DEFAULTS = {"megatron_core": "megatron.core", "qalora_group_size": 16, "peft_version": None}


def portable_adapter_config(cfg: dict) -> dict:
    out = {k: cfg[k] for k in ADAPTER_KEYS if k in cfg}
    for k in ("target_modules", "modules_to_save"):  # peft keeps them as sets: random order
        if isinstance(out.get(k), list):
            out[k] = sorted(out[k])
    out["base_model_name_or_path"] = None  # no path of the machine that made it; the base is ../model
    for k, v in cfg.items():
        if k in out:
            continue
        ok = v in (None, False, {}, []) or (k in ADAPTER_DEFAULTS and (ADAPTER_DEFAULTS[k] is None or ADAPTER_DEFAULTS[k] == v))
        assert ok, f"adapter_config.json: {k} = {v!r} is not a default; keep it"
    return out


def adamw(params):
    return torch.optim.AdamW(
        params,
        lr=ADAMW["lr"],
        betas=tuple(ADAMW["betas"]),
        eps=ADAMW["eps"],
        weight_decay=ADAMW["weight_decay"],
        foreach=False,
        fused=False,
    )


def check_loss_convention(arch: str, logits: torch.Tensor, loss: torch.Tensor, labels: torch.Tensor) -> None:
    """The model's loss is the documented one (see the module's docstring)."""
    import torch.nn.functional as F

    if arch == "bert":
        ours = F.cross_entropy(logits, labels)
    else:
        v = logits.shape[-1]
        ours = F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert torch.allclose(ours, loss, rtol=1e-6, atol=1e-6), (arch, ours.item(), loss.item())


def train(model, batch: dict, named: list) -> tuple:
    """Three AdamW steps on `batch`; the step-0 logits, loss and grads, the losses of the three
    steps and the loss after them."""
    opt = adamw([p for _, p in named])
    losses = []
    first = None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(model, batch)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            first = (
                logits.detach().clone(),
                loss.detach().clone(),
                {n: p.grad.detach().clone() for n, p in named},
            )
        opt.step()
    with torch.no_grad():
        _, after = forward(model, batch)
    return first, losses + [after.item()]


# --------------------------------------------------------------------------------------------
# One architecture


def make_arch(arch: str, out: Path) -> dict:
    from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict

    deterministic(ARCH_SEED[arch])
    root = out / arch
    model_dir = root / "model"
    adapter_dir = root / "lora_adapter"
    for d in (model_dir, adapter_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)

    tok, specials, special_ids = train_tokenizer(arch)
    vocab = tok.get_vocab_size()
    batch, tokens = encode_batch(arch, tok, special_ids["pad"])
    tok.save(str(model_dir / "tokenizer.json"))

    config = make_config(arch, vocab, special_ids)
    model = model_class(arch)(config)
    reinit_small(model, arch)
    model.eval()  # dropout is 0 everywhere: eval and train compute the same
    initial = copy.deepcopy(model)

    model.save_pretrained(str(model_dir), safe_serialization=True)
    for extra in ("generation_config.json",):
        if (model_dir / extra).exists():
            (model_dir / extra).unlink()
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    if arch == "llama" and "rope_theta" not in cfg:
        # transformers 5 writes rope_parameters only; 4.x reads the top-level key.
        cfg["rope_theta"] = 5000.0
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    # ---- full fine-tuning
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    (logits, loss, grads), losses = train(model, batch, named)
    check_loss_convention(arch, logits, loss, batch["labels"])
    full = dict(batch)
    full["logits"] = logits
    full["loss"] = scalar(loss)
    full["step_losses"] = torch.tensor(losses[:STEPS], dtype=torch.float32)
    full["loss_after3"] = torch.tensor(losses[STEPS:], dtype=torch.float32)
    for n, g in grads.items():
        full[f"grad.{n}"] = g
    for n, p in model.named_parameters():
        full[f"after3.{n}"] = p.detach()
    initial_params = dict(initial.named_parameters())
    for n, p in model.named_parameters():
        assert not torch.equal(p, initial_params[n]), f"{arch}: {n} did not change in 3 steps"
    assert torch.isfinite(loss) and all(abs(x) < 1e6 for x in losses)

    # The saved checkpoint reloads to the same logits.
    reloaded = model_class(arch).from_pretrained(str(model_dir), attn_implementation="eager")
    reloaded.eval()
    with torch.no_grad():
        again, _ = forward(reloaded, batch)
    reload_diff = (again - logits).abs().max().item()
    assert reload_diff == 0.0, f"{arch}: reloaded logits differ by {reload_diff}"

    # ---- LoRA
    deterministic(ARCH_SEED[arch] + 100)
    task = "SEQ_CLS" if arch == "bert" else "CAUSAL_LM"
    lcfg = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["lora_alpha"],
        lora_dropout=LORA["lora_dropout"],
        target_modules=LORA_TARGETS[arch],
        bias="none",
        task_type=task,
        fan_in_fan_out=(arch == "gpt2"),
    )
    base = copy.deepcopy(initial)
    pmodel = get_peft_model(base, lcfg)
    gen = torch.Generator().manual_seed(ARCH_SEED[arch] + 200)
    with torch.no_grad():
        for n, p in pmodel.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_(LORA_STD * torch.randn(p.shape, generator=gen))
    pmodel.eval()
    pmodel.save_pretrained(str(adapter_dir), safe_serialization=True)
    readme = adapter_dir / "README.md"
    if readme.exists():
        readme.unlink()
    acfg_path = adapter_dir / "adapter_config.json"
    acfg_path.write_text(json.dumps(portable_adapter_config(json.loads(acfg_path.read_text())), indent=2, sort_keys=True) + "\n")

    # Adapter-file key of every trainable parameter (matched by storage).
    saved = get_peft_model_state_dict(pmodel)
    by_ptr = {v.data_ptr(): k for k, v in saved.items()}
    trainable = [(n, p) for n, p in pmodel.named_parameters() if p.requires_grad]
    key_of = {}
    for n, p in trainable:
        k = by_ptr.get(p.data_ptr())
        assert k is not None, f"{arch}: trainable {n} is not in the adapter's state dict"
        key_of[n] = k
    assert sorted(key_of.values()) == sorted(saved.keys()), (sorted(key_of.values()), sorted(saved.keys()))

    merged_model = copy.deepcopy(pmodel).merge_and_unload()
    merged_model.eval()
    with torch.no_grad():
        merged_logits, _ = forward(merged_model, batch)
    merged_weights = {}
    merged_params = dict(merged_model.named_parameters())
    for n, p in initial.named_parameters():
        if not torch.equal(merged_params[n], p):
            merged_weights[n] = merged_params[n].detach().clone()

    lora_initial = {n: p.detach().clone() for n, p in trainable}
    (llogits, lloss, lgrads), llosses = train(pmodel, batch, trainable)
    check_loss_convention(arch, llogits, lloss, batch["labels"])
    lora = dict(batch)
    lora["logits"] = llogits
    lora["loss"] = scalar(lloss)
    lora["step_losses"] = torch.tensor(llosses[:STEPS], dtype=torch.float32)
    lora["loss_after3"] = torch.tensor(llosses[STEPS:], dtype=torch.float32)
    lora["merged.logits"] = merged_logits
    for n in merged_weights:
        lora[f"merged.{n}"] = merged_weights[n]
    for n, p in trainable:
        lora[f"grad.{key_of[n]}"] = lgrads[n]
        lora[f"after3.{key_of[n]}"] = p.detach()
        assert lgrads[n].abs().max() > 0, f"{arch}: LoRA grad of {n} is zero"
        assert not torch.equal(p.detach(), lora_initial[n]), f"{arch}: LoRA {n} did not change in 3 steps"
    merge_diff = (merged_logits - llogits).abs().max().item()
    assert merge_diff < 1e-4, f"{arch}: merged logits differ from LoRA logits by {merge_diff}"

    # The saved adapter reloads to the same logits.
    rebase = model_class(arch).from_pretrained(str(model_dir), attn_implementation="eager")
    rpeft = PeftModel.from_pretrained(rebase, str(adapter_dir))
    rpeft.eval()
    with torch.no_grad():
        ragain, _ = forward(rpeft, batch)
    adapter_reload_diff = (ragain - llogits).abs().max().item()
    assert adapter_reload_diff == 0.0, f"{arch}: reloaded adapter logits differ by {adapter_reload_diff}"

    # ---- write
    meta = {"producer": "python/make_fixtures.py", "arch": arch}
    save_tensors(full, root / "full.safetensors", {**meta, "kind": "full"})
    save_tensors(lora, root / "lora.safetensors", {**meta, "kind": "lora"})

    hf_names = [n for n, _ in initial.named_parameters()]
    info = {
        "arch": arch,
        "model_class": type(initial).__name__,
        "producer": "python/make_fixtures.py",
        "versions": versions(),
        "seed": ARCH_SEED[arch],
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "init": "every parameter redrawn from a seeded normal: 1-D norm weights 1 + 0.1*N, other 1-D 0.02*N, matrices 0.08*N",
        "weight_orientation": {
            "bert": "nn.Linear [out, in]; embeddings [rows, hidden]",
            "gpt2": "Conv1D (c_attn, c_proj, c_fc) [in, out]; c_attn columns = q|k|v; lm_head tied to transformer.wte.weight",
            "llama": "nn.Linear [out, in]; q/k rows in HF rotate-half RoPE order; lm_head untied",
        }[arch],
        "loss": {
            "bert": "CrossEntropy(logits [batch, num_labels], labels [batch]), mean over the batch",
            "gpt2": "causal LM: CE(logits[:, t], labels[:, t+1]) averaged over the positions whose shifted label != -100",
            "llama": "causal LM: CE(logits[:, t], labels[:, t+1]) averaged over the positions whose shifted label != -100",
        }[arch],
        "positions": "0..seq-1 in every row (no position_ids passed); right padding",
        "tokenizer": {
            "file": "model/tokenizer.json",
            "kind": "WordPiece, lowercase (vocabulary built from word counts, see train_tokenizer)" if arch == "bert" else "byte-level BPE (tokenizers' BpeTrainer)",
            "vocab_size": vocab,
            "special_tokens": specials,
            "special_ids": special_ids,
            "trained_on": "TEXT in python/make_fixtures.py (Alice's Adventures in Wonderland, opening)",
            "batch_encoding": f"truncation to {MAX_LEN[arch]} tokens, padding to the longest row (right, pad id {special_ids['pad']})",
        },
        "batch": {
            "text": BATCH_TEXT["bert" if arch == "bert" else "decoder"],
            "tokens": tokens,
            "lengths": batch["attention_mask"].sum(1).tolist(),
            "extra_ignored_label": None if arch == "bert" else list(EXTRA_IGNORED),
        },
        "optimizer": {"name": "torch.optim.AdamW", **ADAMW, "steps": STEPS, "foreach": False, "amsgrad": False, "decay_on": "every trainable parameter"},
        "params": hf_names,
        "full": {
            "file": "full.safetensors",
            "loss": loss.item(),
            "step_losses": losses[:STEPS],
            "loss_after3": losses[STEPS],
            "tensors": describe(full),
        },
        "lora": {
            "file": "lora.safetensors",
            "adapter_dir": "lora_adapter",
            "task_type": task,
            **LORA,
            "scaling": LORA["lora_alpha"] / LORA["r"],
            "target_modules": LORA_TARGETS[arch],
            "fan_in_fan_out": arch == "gpt2",
            "init": f"lora_A and lora_B redrawn from {LORA_STD}*N(0,1) (seeded generator, in named_parameters order) so B is not zero",
            "trainable": {key_of[n]: n for n, _ in trainable},
            "delta": "W_merged = W + scaling * (B @ A) for [out, in] weights; for GPT-2 Conv1D ([in, out]) W_merged = W + scaling * (B @ A)^T",
            "merged_weights": sorted(merged_weights),
            "merge_vs_lora_max_abs_diff": merge_diff,
            "loss": lloss.item(),
            "step_losses": llosses[:STEPS],
            "loss_after3": llosses[STEPS],
            "tensors": describe(lora),
        },
        "checks": {"reload_max_abs_diff": reload_diff, "adapter_reload_max_abs_diff": adapter_reload_diff},
    }
    (root / "fixture.json").write_text(json.dumps(info, indent=2) + "\n")

    n_lora_grads = sum(1 for n, _ in trainable)
    print(
        f"{arch}: vocab {vocab}, batch {tuple(batch['input_ids'].shape)}, lengths {info['batch']['lengths']}, "
        f"loss {loss.item():.6f} -> {losses[-1]:.6f} after {STEPS} steps; "
        f"{len(grads)} grads; LoRA loss {lloss.item():.6f} -> {llosses[-1]:.6f}, {n_lora_grads} trainable, "
        f"merged-vs-LoRA {merge_diff:.2e}"
    )
    return info


def files_of(d: Path) -> list:
    return sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: tests/fixtures/hf in the repo)")
    ap.add_argument("--arch", default="bert,gpt2,llama", help="comma list of bert, gpt2, llama")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out byte for byte")
    args = ap.parse_args()
    quiet()
    archs = [a for a in args.arch.split(",") if a]
    for a in archs:
        if a not in ARCH_SEED:
            ap.error(f"unknown arch {a}")
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for a in archs:
                make_arch(a, tmp)
            bad = []
            for a in archs:
                ours, theirs = files_of(tmp / a), files_of(args.out / a)
                if ours != theirs:
                    bad.append(f"{a}: file lists differ: {ours} vs {theirs}")
                for f in ours:
                    if f.name == "fixture.json":
                        continue  # holds the versions, which may differ
                    if (args.out / a / f).exists() and not filecmp.cmp(tmp / a / f, args.out / a / f, shallow=False):
                        bad.append(f"{a}/{f} differs")
            for b in bad:
                print("MISMATCH", b)
            print("check:", "identical" if not bad else f"{len(bad)} differences")
            return 1 if bad else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for a in archs:
        make_arch(a, args.out)
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out} ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
