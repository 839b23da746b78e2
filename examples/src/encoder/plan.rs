//! The tensors of one encoder layer and their layouts under a strategy.
//!
//! Every layout is declared once here. Activations of one width share one declaration (as
//! `#[tensor(like = X)]` does for declared tensors), and a gradient shares the declaration of
//! the tensor it is the gradient of: the same [`View`], so kernels built for a tensor take its
//! gradient, and a gradient that flows through a sum or a bias (where it is the gradient of
//! several tensors at once) has one layout for all of them. The kernels read them through views made from these declarations: activations
//! `[batch, seq, width]` as token matrices (`merge(batch, seq → tokens)`), the fused
//! projection as queries, keys and values (split, slice, merge), weights transposed for the
//! backward.

use std::collections::BTreeMap;

use fblayout_core::layout::{LayoutSpec, TensorLayout, View};

/// The sizes of the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) batch: u32,
    pub(crate) seq: u32,
    pub(crate) hidden: u32,
    pub(crate) heads: u32,
    pub(crate) ffn: u32,
}

impl Config {
    /// Checks the sizes fit together.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return Err(format!(
                "--hidden {} is not a multiple of --heads {}",
                self.hidden, self.heads
            ));
        }
        for (name, v) in [
            ("--batch", self.batch),
            ("--seq", self.seq),
            ("--hidden", self.hidden),
            ("--ffn", self.ffn),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }

    /// Tokens per batch.
    pub(crate) fn tokens(&self) -> u32 {
        self.batch * self.seq
    }

    /// The run-time extents of an activation or attention tensor.
    pub(crate) fn bind(&self) -> Vec<(&'static str, u32)> {
        vec![("batch", self.batch), ("seq", self.seq)]
    }
}

/// How tensors are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The plan fblayout proposes: R-Tile activations (the forward reduces `hidden`, the
    /// backward `seq`), R-Tile weights (8×8 tiles: forward reduces `d_in`, backward `d_out`)
    /// and R-Tile attention probabilities (forward reduces keys, backward queries).
    Planned,
    /// One row-major layout for every tensor, forward and backward.
    RowMajor,
}

impl Strategy {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Planned => "planned",
            Self::RowMajor => "row-major",
        }
    }
}

/// What kind of tensor a declaration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `[batch, seq, width]`.
    Activation,
    /// `[d_in, d_out]`.
    Weight,
    /// `[n]`.
    Vector,
    /// `[batch, seq]`: one value per token (LayerNorm statistics).
    PerToken,
    /// `[batch, heads, seq_q, seq_k]`.
    Scores,
}

/// One declared tensor.
#[derive(Debug, Clone)]
pub(crate) struct Decl {
    pub(crate) kind: Kind,
    pub(crate) layout: TensorLayout,
}

/// Every tensor of the layer, by name (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) config: Config,
    /// The declarations, by name: one per activation width, per weight, per vector, and the
    /// per-token statistics and probabilities.
    decls: BTreeMap<&'static str, Decl>,
    /// Every tensor → the declaration it uses.
    tensors: BTreeMap<&'static str, &'static str>,
}

/// The activations `[batch, seq, width]`, and the gradients that share their layouts.
pub(crate) const ACTIVATIONS: &[(&str, Width)] = &[
    ("x", Width::Hidden),
    ("qkv_lin", Width::Qkv),
    ("qkv", Width::Qkv),
    ("ctx", Width::Hidden),
    ("attn_lin", Width::Hidden),
    ("h1_pre", Width::Hidden),
    ("h1", Width::Hidden),
    ("f1_lin", Width::Ffn),
    ("f1", Width::Ffn),
    ("g", Width::Ffn),
    ("f2_lin", Width::Hidden),
    ("h2_pre", Width::Hidden),
    ("out", Width::Hidden),
];

/// Each gradient and the tensor whose layout it shares.
pub(crate) const GRADIENTS: &[(&str, &str)] = &[
    ("d_out", "out"),
    ("d_h2", "h2_pre"),
    ("d_g", "g"),
    ("d_f1", "f1"),
    ("d_h1_ffn", "h1"),
    ("d_h1", "h1"),
    ("d_h1_pre", "h1_pre"),
    ("d_ctx", "ctx"),
    ("d_qkv", "qkv"),
    ("d_x_attn", "x"),
    ("d_x", "x"),
    ("d_wqkv", "wqkv"),
    ("d_bqkv", "bqkv"),
    ("d_wo", "wo"),
    ("d_bo", "bo"),
    ("d_w1", "w1"),
    ("d_b1", "b1"),
    ("d_w2", "w2"),
    ("d_b2", "b2"),
    ("d_g1", "g1"),
    ("d_be1", "be1"),
    ("d_g2", "g2"),
    ("d_be2", "be2"),
];

/// An activation's width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    Hidden,
    Qkv,
    Ffn,
}

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Plan {
    /// Every tensor of a layer of `config` under `strategy`.
    pub(crate) fn new(config: Config, strategy: Strategy) -> Result<Self, String> {
        config.check()?;
        let c = config;
        let tiled = strategy == Strategy::Planned;
        let mut decls = BTreeMap::new();
        let mut tensors: BTreeMap<&'static str, &'static str> = BTreeMap::new();
        for width in [Width::Hidden, Width::Qkv, Width::Ffn] {
            let (name, n) = match width {
                Width::Hidden => ("act", c.hidden),
                Width::Qkv => ("act_qkv", 3 * c.hidden),
                Width::Ffn => ("act_ffn", c.ffn),
            };
            let spec = LayoutSpec::new(name).dyn_axis("batch").dyn_axis("seq");
            let spec = if tiled {
                // Tiles of 4 along seq (padded when 4 doesn't divide the run-time length)
                // and hidden: the forward reduces hidden (LayerNorm), the backward seq (bias,
                // norm weights and dW).
                spec.tile(4, true)
                    .axis("hidden", n)
                    .tile(tile_for(n, 4), false)
                    .rtile()
                    .reduce_forward(["hidden"])
                    .reduce_backward(["seq"])
            } else {
                spec.axis("hidden", n)
            };
            decls.insert(name, decl(Kind::Activation, spec)?);
            for &(tensor, w) in ACTIVATIONS {
                if w == width {
                    tensors.insert(tensor, name);
                }
            }
        }
        for (name, d_in, d_out) in [
            ("wqkv", c.hidden, 3 * c.hidden),
            ("wo", c.hidden, c.hidden),
            ("w1", c.hidden, c.ffn),
            ("w2", c.ffn, c.hidden),
        ] {
            let spec = LayoutSpec::new(name);
            let spec = if tiled {
                spec.axis("d_in", d_in)
                    .tile(tile_for(d_in, 8), false)
                    .axis("d_out", d_out)
                    .tile(tile_for(d_out, 8), false)
                    .rtile()
                    .reduce_forward(["d_in"])
                    .reduce_backward(["d_out"])
            } else {
                spec.axis("d_in", d_in).axis("d_out", d_out)
            };
            decls.insert(name, decl(Kind::Weight, spec)?);
        }
        for (name, n) in [
            ("bqkv", 3 * c.hidden),
            ("bo", c.hidden),
            ("b1", c.ffn),
            ("b2", c.hidden),
            ("g1", c.hidden),
            ("be1", c.hidden),
            ("g2", c.hidden),
            ("be2", c.hidden),
        ] {
            decls.insert(
                name,
                decl(Kind::Vector, LayoutSpec::new(name).axis("n", n))?,
            );
        }
        for name in ["mean1", "rstd1", "mean2", "rstd2"] {
            let spec = LayoutSpec::new(name).dyn_axis("batch").dyn_axis("seq");
            decls.insert(name, decl(Kind::PerToken, spec)?);
        }
        let spec = LayoutSpec::new("probs")
            .dyn_axis("batch")
            .axis("heads", c.heads)
            .dyn_axis("seq_q");
        let spec = if tiled {
            spec.tile(4, true)
                .dyn_axis("seq_k")
                .tile(4, true)
                .rtile()
                .reduce_forward(["seq_k"])
                .reduce_backward(["seq_q"])
        } else {
            spec.dyn_axis("seq_k")
        };
        decls.insert("probs", decl(Kind::Scores, spec)?);
        for &name in decls.keys() {
            if decls[name].kind != Kind::Activation {
                tensors.insert(name, name);
            }
        }
        for &(grad, of) in GRADIENTS {
            let shared = tensors[of];
            tensors.insert(grad, shared);
        }
        Ok(Self {
            config,
            decls,
            tensors,
        })
    }

    /// The declaration tensor `name` uses.
    pub(crate) fn decl(&self, name: &str) -> &Decl {
        let shared = self
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("the layer has no tensor `{name}`"));
        &self.decls[shared]
    }

    /// Every tensor, gradients included.
    pub(crate) fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tensors.keys().copied()
    }

    /// Every declaration: its name and layout.
    pub(crate) fn declarations(&self) -> impl Iterator<Item = (&'static str, &Decl)> + '_ {
        self.decls.iter().map(|(n, d)| (*n, d))
    }

    /// The tensor read as declared.
    pub(crate) fn view(&self, name: &str) -> View {
        self.decl(name).layout.view()
    }

    /// The run-time extents `name` is bound to.
    pub(crate) fn bind(&self, name: &str) -> Vec<(&'static str, u32)> {
        match self.decl(name).kind {
            Kind::Activation | Kind::PerToken => self.config.bind(),
            Kind::Scores => vec![
                ("batch", self.config.batch),
                ("seq_q", self.config.seq),
                ("seq_k", self.config.seq),
            ],
            Kind::Weight | Kind::Vector => Vec::new(),
        }
    }

    /// An activation (or per-token tensor) read as a matrix of tokens: `[tokens, width]` (or
    /// `[tokens]`).
    pub(crate) fn tokens(&self, name: &str) -> Result<View, String> {
        self.view(name)
            .merge(&["batch", "seq"], "tokens")
            .map_err(failed)
    }

    /// An activation `[batch, seq, hidden]` read as `[batch, seq, heads, head_dim]`.
    pub(crate) fn heads(&self, name: &str) -> Result<View, String> {
        let c = self.config;
        self.view(name)
            .split("hidden", &[("heads", Some(c.heads)), ("head_dim", None)])
            .map_err(failed)
    }
}

/// The largest of `want`, 4, 2, 1 that divides `n` (tiles never pad a static axis here).
fn tile_for(n: u32, want: u32) -> u32 {
    [want, 4, 2, 1]
        .into_iter()
        .find(|t| n.is_multiple_of(*t))
        .unwrap_or(1)
}

fn decl(kind: Kind, spec: LayoutSpec) -> Result<Decl, String> {
    Ok(Decl {
        kind,
        layout: spec.build().map_err(failed)?,
    })
}
