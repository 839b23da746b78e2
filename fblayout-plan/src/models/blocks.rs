//! The pieces models are built of: tensors and operations named by the caller.

use fblayout_core::layout::ElemType;

use crate::graph::optimizer::add_adamw;
use crate::graph::{Act, Dim, Graph, GraphError, HeadLoss, Op, Role, TensorId, derive_backward};

/// Checks that every size `(name, value)` of a model `model`'s config is at least 1.
pub(super) fn at_least_one(model: &'static str, sizes: &[(&str, u32)]) -> Result<(), GraphError> {
    match sizes.iter().find(|&&(_, v)| v == 0) {
        Some((name, _)) => Err(GraphError::Shape {
            op: model,
            detail: format!("{name} must be at least 1"),
        }),
        None => Ok(()),
    }
}

/// Checks that model `model`'s `hidden` size splits into `heads` heads.
pub(super) fn heads_divide(model: &'static str, hidden: u32, heads: u32) -> Result<(), GraphError> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(GraphError::Shape {
            op: model,
            detail: format!("hidden {hidden} is not a multiple of heads {heads}"),
        });
    }
    Ok(())
}

/// Checks that model `model`'s LayerNorm ε is a positive number.
pub(super) fn positive_eps(model: &'static str, eps: f32) -> Result<(), GraphError> {
    if !(f64::from(eps).is_finite() && eps > 0.0) {
        return Err(GraphError::Shape {
            op: model,
            detail: format!("LayerNorm's ε {eps} must be positive"),
        });
    }
    Ok(())
}

/// A model's per-token loss `loss [batch, seq]`, added to `g`.
pub(super) fn loss_tensor(g: &mut Graph) -> Result<TensorId, GraphError> {
    g.add_tensor(
        "loss",
        &[("batch", Dim::Batch), ("seq", Dim::Seq)],
        ElemType::F32,
        Role::Loss,
    )
}

/// The backward and AdamW of `forward` (a model's forward and loss, perhaps transformed):
/// the finished training graph.
pub(super) fn train(mut forward: Graph) -> Result<Graph, GraphError> {
    derive_backward(&mut forward)?;
    add_adamw(&mut forward)?;
    Ok(forward)
}

/// Adds the tensors and operations of a model's blocks, named by the caller.
pub(super) struct Blocks {
    pub(super) g: Graph,
}

impl Blocks {
    pub(super) fn new() -> Self {
        Self { g: Graph::new() }
    }

    /// The loss of `logits` against `labels` (`u32::MAX` counts for nothing): the forward,
    /// ready for a transform (LoRA) before its backward.
    pub(super) fn forward(
        mut self,
        logits: TensorId,
        labels: TensorId,
    ) -> Result<Graph, GraphError> {
        let loss = loss_tensor(&mut self.g)?;
        let ce = Op::CrossEntropy {
            ignore_index: u32::MAX,
        };
        self.g.push(ce, &[logits, labels], &[loss])?;
        Ok(self.g)
    }

    /// The loss of the head `w` over `x` against `labels`, with the head and its cross-entropy
    /// one operation that makes the logits `chunk` tokens at a time ([`Op::HeadLoss`]):
    /// the forward, ready for a transform before its backward. `w` is `[d_in, vocab]`, or
    /// `[vocab, d_in]` read transposed (a head tied to the embedding table).
    pub(super) fn fused_forward(
        mut self,
        [x, w, labels]: [TensorId; 3],
        transposed: bool,
        chunk: u32,
    ) -> Result<Graph, GraphError> {
        let loss = loss_tensor(&mut self.g)?;
        let head = HeadLoss {
            ignore_index: u32::MAX,
            transposed,
            biased: false,
            chunk,
            frozen: false,
        };
        self.g.push(Op::HeadLoss(head), &[x, w, labels], &[loss])?;
        Ok(self.g)
    }

    /// `attention` over `inputs`, writing a context `width` wide and saving the probabilities
    /// of `heads` heads as `<name>.probs`.
    pub(super) fn attention(
        &mut self,
        name: &str,
        attention: Op,
        inputs: &[TensorId],
        heads: u32,
        width: u32,
    ) -> Result<TensorId, GraphError> {
        let ctx = self.act(&format!("{name}.ctx"), width)?;
        let probs = self.g.add_tensor(
            format!("{name}.probs"),
            &[
                ("batch", Dim::Batch),
                ("heads", Dim::Fixed(heads)),
                ("seq_q", Dim::Seq),
                ("seq_k", Dim::Seq),
            ],
            ElemType::F32,
            Role::Activation,
        )?;
        self.g.push(attention, inputs, &[ctx, probs])?;
        Ok(ctx)
    }

    /// `LayerNorm(x)` with its weight and bias the parameters `weight` and `bias`.
    pub(super) fn layer_norm(
        &mut self,
        [weight, bias]: [&str; 2],
        name: &str,
        x: TensorId,
        eps: f32,
    ) -> Result<TensorId, GraphError> {
        let w = self.width(x);
        let gamma = self.param(weight, &[("hidden", w)])?;
        let beta = self.param(bias, &[("hidden", w)])?;
        let y = self.act(name, w)?;
        let stat = |g: &mut Graph, s: &str| {
            g.add_tensor(
                format!("{name}.{s}"),
                &[("batch", Dim::Batch), ("seq", Dim::Seq)],
                ElemType::F32,
                Role::Activation,
            )
        };
        let mean = stat(&mut self.g, "mean")?;
        let rstd = stat(&mut self.g, "rstd")?;
        let op = Op::LayerNorm {
            eps,
            residual: false,
        };
        self.g
            .push_norm(op, x, &[gamma, beta], &[y, mean, rstd], true)?;
        Ok(y)
    }

    /// `x + b` with `b` the parameter `bias`.
    pub(super) fn bias(
        &mut self,
        bias: &str,
        name: &str,
        x: TensorId,
    ) -> Result<TensorId, GraphError> {
        let w = self.width(x);
        let b = self.param(bias, &[("hidden", w)])?;
        let y = self.act(name, w)?;
        self.g.push(Op::Bias, &[x, b], &[y])?;
        Ok(y)
    }

    /// The pointwise `act(x)`.
    pub(super) fn activation(
        &mut self,
        act: Act,
        name: &str,
        x: TensorId,
    ) -> Result<TensorId, GraphError> {
        let y = self.act(name, self.width(x))?;
        self.g.push(Op::Activation(act), &[x], &[y])?;
        Ok(y)
    }
    pub(super) fn tokens(&mut self, name: &str) -> Result<TensorId, GraphError> {
        let axes = [("batch", Dim::Batch), ("seq", Dim::Seq)];
        self.g.add_tensor(name, &axes, ElemType::U32, Role::Input)
    }

    pub(super) fn param(
        &mut self,
        name: &str,
        axes: &[(&str, u32)],
    ) -> Result<TensorId, GraphError> {
        let axes: Vec<(&str, Dim)> = axes.iter().map(|&(n, e)| (n, Dim::Fixed(e))).collect();
        self.g.add_tensor(name, &axes, ElemType::F32, Role::Param)
    }

    /// An activation `[batch, seq, width]`.
    pub(super) fn act(&mut self, name: &str, width: u32) -> Result<TensorId, GraphError> {
        let axes = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(width)),
        ];
        self.g
            .add_tensor(name, &axes, ElemType::F32, Role::Activation)
    }

    pub(super) fn width(&self, t: TensorId) -> u32 {
        match self.g.tensor(t).axes.last().map(|a| a.dim) {
            Some(Dim::Fixed(n)) => n,
            _ => 0,
        }
    }

    pub(super) fn add(
        &mut self,
        name: &str,
        a: TensorId,
        b: TensorId,
    ) -> Result<TensorId, GraphError> {
        let y = self.act(name, self.width(a))?;
        self.g.push(Op::Add, &[a, b], &[y])?;
        Ok(y)
    }

    /// `RMSNorm(x)` with its weight the parameter `weight`.
    pub(super) fn rms_norm(
        &mut self,
        weight: &str,
        name: &str,
        x: TensorId,
        eps: f32,
    ) -> Result<TensorId, GraphError> {
        let w = self.width(x);
        let gamma = self.param(weight, &[("hidden", w)])?;
        let y = self.act(name, w)?;
        let rstd = self.g.add_tensor(
            format!("{name}.rstd"),
            &[("batch", Dim::Batch), ("seq", Dim::Seq)],
            ElemType::F32,
            Role::Activation,
        )?;
        let op = Op::RmsNorm {
            eps,
            residual: false,
        };
        self.g.push_norm(op, x, &[gamma], &[y, rstd], true)?;
        Ok(y)
    }

    /// `x·w` with `w` the parameter `weight`, `[width(x), out]`.
    pub(super) fn linear(
        &mut self,
        weight: &str,
        name: &str,
        x: TensorId,
        out: u32,
    ) -> Result<TensorId, GraphError> {
        let w = self.param(weight, &[("d_in", self.width(x)), ("d_out", out)])?;
        let y = self.act(name, out)?;
        self.g.push(Op::Linear, &[x, w], &[y])?;
        Ok(y)
    }

    /// `x` rotated by RoPE over `heads` heads, reading `[positions, cos, sin]`.
    pub(super) fn rope(
        &mut self,
        name: &str,
        x: TensorId,
        heads: u32,
        [positions, cos, sin]: [TensorId; 3],
    ) -> Result<TensorId, GraphError> {
        let y = self.act(name, self.width(x))?;
        self.g
            .push(Op::Rope { heads }, &[x, positions, cos, sin], &[y])?;
        Ok(y)
    }
}
