//! LoRA: low-rank adapters on a model's linear layers, the base weights frozen.
//!
//! [`apply`] rewrites a model's forward (before its backward is derived): every parameter is
//! frozen ([`Role::Frozen`]), and each linear layer `y = x·W` whose module is targeted (by its
//! name's last component, as peft matches `target_modules`: `c_attn`, `q_proj`, …) gets two
//! trained matrices, `A` `[rank, d_in]` and `B` `[d_out, rank]`, stored as peft stores them
//! (`nn.Linear`'s `[out, in]`) and read through their transposed views ([`Op::LinearT`]), never
//! copied:
//!
//! `y' = x·W + s · (x·Aᵀ)·Bᵀ`, with `s = alpha / rank`.
//!
//! The scaling is the factor of `B`'s product ([`Op::LinearT`]'s `scale`, the kernels'
//! `alpha`), so the whole adapter runs on the linear layer's own kernels with no pass of its
//! own: its backward's two products scale by it too. `A` and `B` carry the names
//! peft's `save_pretrained` gives them (`base_model.model.<module>.lora_A.weight`), so an
//! adapter file's tensors load by name. The graph's orientation of `W` is `[d_in, d_out]` for
//! every model (GPT-2's `Conv1D` as stored, `nn.Linear`'s transposed on load), so `A` and `B`
//! need no orientation of their own; GPT-2's `fan_in_fan_out` only matters to an export that
//! merges them into the checkpoint's `W`.
//!
//! peft's `modules_to_save` ([`LoraConfig::with_modules_to_save`]) names modules trained in
//! full beside the adapters (a sequence classifier's head, for peft's `SEQ_CLS` task): their
//! parameters stay [`Role::Param`] ([`Lora::saved`]), under their own names. A module matches
//! as in peft: a module on the parameter's path whose name ends with the entry (`classifier`
//! matches `classifier.weight` and `classifier.bias`); an entry that matches nothing is left
//! alone, as peft leaves it (peft's `SEQ_CLS` lists `classifier` and `score`, whichever the
//! model has).
//!
//! ```
//! use fblayout_plan::graph::{Role, derive_backward, optimizer::add_adamw};
//! use fblayout_plan::lora::{self, LoraConfig};
//! use fblayout_plan::models::gpt2::{Gpt2Config, forward};
//!
//! let mut g = forward(&Gpt2Config::new(100, 32, 4).with_layers(2))?;
//! let lora = lora::apply(&mut g, &LoraConfig::new(4, 8.0, ["c_attn"]))?;
//! derive_backward(&mut g)?;
//! add_adamw(&mut g)?;
//! // Two adapters of two matrices each are all that trains.
//! assert_eq!(lora.adapters.len(), 2);
//! assert_eq!(g.params().len(), 4);
//! let base = g.find("transformer.h.0.attn.c_attn.weight").unwrap();
//! assert_eq!(g.tensor(base).role, Role::Frozen);
//! assert!(g.grad(base).is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use fblayout_core::layout::ElemType;

use crate::exec::named_rng;
use crate::graph::{Dim, Graph, GraphError, Node, Op, Role, TensorId};

/// The prefix peft's `save_pretrained` gives a LoRA model's tensor names.
pub const PEFT_PREFIX: &str = "base_model.model.";

/// What LoRA adapts, and how (peft's `LoraConfig`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoraConfig {
    /// The adapters' rank `r`.
    pub rank: u32,
    /// `lora_alpha`: the update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// `lora_dropout`: only 0 is supported.
    pub dropout: f64,
    /// The targeted modules, by the last component of their names (`c_attn`, `q_proj`).
    pub target_modules: Vec<String>,
    /// peft's `modules_to_save`: modules trained in full beside the adapters (see the module
    /// docs).
    pub modules_to_save: Vec<String>,
}

impl LoraConfig {
    /// Rank `rank`, `alpha`, no dropout, adapting `target_modules`.
    pub fn new<S: Into<String>>(
        rank: u32,
        alpha: f64,
        target_modules: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            rank,
            alpha,
            dropout: 0.0,
            target_modules: target_modules.into_iter().map(Into::into).collect(),
            modules_to_save: Vec::new(),
        }
    }

    /// Also training the modules `modules` in full (peft's `modules_to_save`; see the module
    /// docs).
    pub fn with_modules_to_save<S: Into<String>>(
        mut self,
        modules: impl IntoIterator<Item = S>,
    ) -> Self {
        self.modules_to_save = modules.into_iter().map(Into::into).collect();
        self
    }

    /// With dropout `dropout` ([`apply`] accepts only 0).
    pub fn with_dropout(mut self, dropout: f64) -> Self {
        self.dropout = dropout;
        self
    }

    /// The update's scale, `alpha / rank`.
    pub fn scaling(&self) -> f64 {
        self.alpha / f64::from(self.rank)
    }
}

/// Why LoRA could not be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LoraError {
    /// Dropout other than 0.
    #[error("LoRA dropout {0} is not supported: only 0 is")]
    Dropout(f64),
    /// A rank of 0, or an alpha that is not finite.
    #[error("LoRA needs a rank of at least 1 and a finite alpha; given rank {rank}, alpha {alpha}")]
    Settings {
        /// The rank.
        rank: u32,
        /// Alpha.
        alpha: f64,
    },
    /// No targets given.
    #[error("LoRA needs at least one target module; the linear modules are: {}", available.join(", "))]
    NoTargets {
        /// The modules that could be targeted.
        available: Vec<String>,
    },
    /// A target matches no linear module.
    #[error("no linear module is named `{target}`; the linear modules are: {}", available.join(", "))]
    UnknownTarget {
        /// The target.
        target: String,
        /// The modules that could be targeted.
        available: Vec<String>,
    },
    /// A module of `modules_to_save` is also adapted: it would train in full and through its
    /// adapter at once.
    #[error(
        "`{module}` is both in modules_to_save (trained in full) and adapted by LoRA's target \
         `{target}`: train it one way"
    )]
    SavedAndAdapted {
        /// The module.
        module: String,
        /// The target that adapts it.
        target: String,
    },
    /// A parameter of `modules_to_save` is shared by several layers (a tied embedding and
    /// head): peft trains a copy of the module, untying them, which one graph parameter can't.
    #[error(
        "modules_to_save `{entry}` covers `{name}`, which {uses} layers share (tied weights): \
         peft would train a copy for one of them, which fblayout does not support"
    )]
    SavedTied {
        /// The modules_to_save entry.
        entry: String,
        /// The shared parameter.
        name: String,
        /// How many layers read it.
        uses: usize,
    },
    /// The graph already has its backward.
    #[error("LoRA rewrites the forward: apply it before the backward is derived")]
    HasBackward,
    /// The rewritten graph is not well-formed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// One adapted linear layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    /// The module's name (`transformer.h.0.attn.c_attn`).
    pub module: String,
    /// Its frozen base weight, `[d_in, d_out]`.
    pub base: TensorId,
    /// `A`, `[rank, d_in]`.
    pub a: TensorId,
    /// `B`, `[d_out, rank]`.
    pub b: TensorId,
}

/// What [`apply`] added.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    /// The settings it was applied with.
    pub config: LoraConfig,
    /// The adapted layers, in the forward's order.
    pub adapters: Vec<Adapter>,
    /// The parameters of `modules_to_save`, trained in full, in the graph's order.
    pub saved: Vec<TensorId>,
}

impl Lora {
    /// Whether tensor `t` is an adapter's `A` or `B`.
    pub fn is_adapter(&self, t: TensorId) -> bool {
        self.adapters.iter().any(|a| a.a == t || a.b == t)
    }

    /// Every adapter matrix with its initial values as peft's default makes them: `A`
    /// uniform in `±1/√d_in` (Kaiming-uniform with `a = √5`), `B` zero, so the adapted model
    /// starts as the base. `A` draws from `seed` and its name, so that the same adapters
    /// start the same whatever else the graph holds (a fused head, other targets).
    pub fn initial_values(&self, graph: &Graph, seed: u64) -> Vec<(String, Vec<f64>)> {
        let mut out = Vec::with_capacity(2 * self.adapters.len());
        for adapter in &self.adapters {
            let a = graph.tensor(adapter.a);
            let [rank, d_in] = fixed(graph, adapter.a);
            let bound = 1.0 / f64::from(d_in).sqrt();
            let mut rng = named_rng(&a.name, seed);
            let values = (0..rank * d_in)
                .map(|_| rng.uniform(-bound, bound))
                .collect();
            out.push((a.name.clone(), values));
            let b = graph.tensor(adapter.b);
            let [d_out, rank] = fixed(graph, adapter.b);
            out.push((b.name.clone(), vec![0.0; (d_out * rank) as usize]));
        }
        out
    }
}

/// The entry of `modules_to_save` that covers parameter `name`, if any: peft's rule, a module
/// on its path (`a`, `a.b`, … of `a.b.weight`) whose name ends with the entry.
pub fn saved_by<'a>(modules_to_save: &'a [String], name: &str) -> Option<&'a str> {
    let modules = name
        .match_indices('.')
        .map(|(i, _)| &name[..i])
        .collect::<Vec<_>>();
    modules_to_save
        .iter()
        .find(|entry| modules.iter().any(|m| m.ends_with(entry.as_str())))
        .map(String::as_str)
}

/// The two fixed extents of matrix `t`.
fn fixed(graph: &Graph, t: TensorId) -> [u32; 2] {
    let e: Vec<u32> = graph
        .tensor(t)
        .axes
        .iter()
        .map(|a| match a.dim {
            Dim::Fixed(n) => n,
            // Weights have fixed extents.
            Dim::Batch | Dim::Seq => 0,
        })
        .collect();
    [e[0], e[1]]
}

/// The module a linear layer's weight `name` belongs to: the name without its `.weight`.
fn module_of(name: &str) -> &str {
    name.strip_suffix(".weight").unwrap_or(name)
}

/// Whether module `module` is targeted by `target` (peft's rule: the whole name, or its
/// last components after a dot).
fn targets(module: &str, target: &str) -> bool {
    module == target
        || module
            .strip_suffix(target)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// The forward's linear layers whose weight is a parameter: `(node, weight)`.
fn linear_layers(graph: &Graph) -> Vec<(usize, TensorId)> {
    graph
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.op == Op::Linear)
        .filter(|(_, n)| graph.tensor(n.inputs[1]).role == Role::Param)
        .map(|(i, n)| (i, n.inputs[1]))
        .collect()
}

/// The adapter names peft gives module `module`: `A`'s and `B`'s.
pub fn adapter_names(module: &str) -> [String; 2] {
    ["lora_A", "lora_B"].map(|m| format!("{PEFT_PREFIX}{module}.{m}.weight"))
}

/// Applies LoRA to `graph`, a forward with its loss (see the module docs).
pub fn apply(graph: &mut Graph, config: &LoraConfig) -> Result<Lora, LoraError> {
    if config.dropout != 0.0 {
        return Err(LoraError::Dropout(config.dropout));
    }
    if config.rank == 0 || !config.alpha.is_finite() {
        return Err(LoraError::Settings {
            rank: config.rank,
            alpha: config.alpha,
        });
    }
    if graph.has_backward() {
        return Err(LoraError::HasBackward);
    }
    let layers = linear_layers(graph);
    let mut available: Vec<String> = Vec::new();
    for &(_, w) in &layers {
        let module = module_of(&graph.tensor(w).name);
        let leaf = module.rsplit('.').next().unwrap_or(module).to_owned();
        if !available.contains(&leaf) {
            available.push(leaf);
        }
    }
    if config.target_modules.is_empty() {
        return Err(LoraError::NoTargets { available });
    }
    for target in &config.target_modules {
        let any = layers
            .iter()
            .any(|&(_, w)| targets(module_of(&graph.tensor(w).name), target));
        if !any {
            return Err(LoraError::UnknownTarget {
                target: target.clone(),
                available,
            });
        }
    }
    let mut saved = Vec::new();
    for p in graph.params() {
        let name = graph.tensor(p).name.clone();
        let Some(entry) = saved_by(&config.modules_to_save, &name) else {
            graph.freeze(p)?;
            continue;
        };
        let module = module_of(&name);
        if let Some(target) = config
            .target_modules
            .iter()
            .find(|t| layers.iter().any(|&(_, w)| w == p && targets(module, t)))
        {
            return Err(LoraError::SavedAndAdapted {
                module: module.to_owned(),
                target: target.clone(),
            });
        }
        let uses = graph
            .nodes()
            .iter()
            .filter(|n| n.inputs.contains(&p))
            .count();
        if uses > 1 {
            return Err(LoraError::SavedTied {
                entry: entry.to_owned(),
                name,
                uses,
            });
        }
        saved.push(p);
    }
    let chosen: Vec<(usize, TensorId)> = layers
        .into_iter()
        .filter(|&(_, w)| {
            let module = module_of(&graph.tensor(w).name);
            config.target_modules.iter().any(|t| targets(module, t))
        })
        .collect();
    let mut adapters = Vec::with_capacity(chosen.len());
    // Each adapter adds three operations after its layer: later positions move by three.
    for (k, &(at, base)) in chosen.iter().enumerate() {
        adapters.push(adapt(graph, at + 3 * k, base, config)?);
    }
    Ok(Lora {
        config: config.clone(),
        adapters,
        saved,
    })
}

/// Adds the adapter of the linear layer at node `at` (weight `base`) right after it, and
/// makes every later reader of its output read the adapted output.
fn adapt(
    graph: &mut Graph,
    at: usize,
    base: TensorId,
    config: &LoraConfig,
) -> Result<Adapter, LoraError> {
    let node = graph.nodes()[at].clone();
    let (x, y) = (node.inputs[0], node.outputs[0]);
    let [d_in, d_out] = fixed(graph, base);
    let r = config.rank;
    let module = module_of(&graph.tensor(base).name).to_owned();
    let [a_name, b_name] = adapter_names(&module);
    let fixed_axes = |axes: [(&'static str, u32); 2]| axes.map(|(n, e)| (n, Dim::Fixed(e)));
    let a = graph.add_tensor(
        a_name,
        &fixed_axes([("rank", r), ("d_in", d_in)]),
        ElemType::F32,
        Role::Param,
    )?;
    let b = graph.add_tensor(
        b_name,
        &fixed_axes([("d_out", d_out), ("rank", r)]),
        ElemType::F32,
        Role::Param,
    )?;
    let y_name = graph.tensor(y).name.clone();
    let elem = graph.tensor(y).elem;
    let act = |g: &mut Graph, suffix: &str, width: u32| {
        let axes = [
            ("batch", Dim::Batch),
            ("seq", Dim::Seq),
            ("hidden", Dim::Fixed(width)),
        ];
        g.add_tensor(format!("{y_name}.{suffix}"), &axes, elem, Role::Activation)
    };
    let xa = act(graph, "lora_a", r)?;
    let delta = act(graph, "lora_delta", d_out)?;
    let adapted = act(graph, "lora", d_out)?;
    let tail: Vec<Node> = graph.nodes_mut().split_off(at + 1);
    graph.push(Op::LinearT { scale: 1.0 }, &[x, a], &[xa])?;
    // peft's `scaling`, to the precision the kernels' factor has.
    let scale = config.scaling() as f32;
    graph.push(Op::LinearT { scale }, &[xa, b], &[delta])?;
    graph.push(Op::Add, &[y, delta], &[adapted])?;
    for mut n in tail {
        for input in &mut n.inputs {
            if *input == y {
                *input = adapted;
            }
        }
        graph.push(n.op, &n.inputs, &n.outputs)?;
    }
    Ok(Adapter { module, base, a, b })
}
