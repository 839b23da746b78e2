//! Elementwise kernels: every output element is a function of the input elements at the same
//! logical coordinate.
//!
//! The generator takes the operands (inputs and outputs of one logical shape, each through its
//! own view, so a bias broadcast along rows or a transposed input are just views) and one WGSL
//! expression per output over the inputs' values. It writes one entry point that walks the
//! logical shape; where every operand has wide accesses along the last axis
//! ([`Operand::vectorized`]) an invocation handles four neighbours with `load4`/`store4` and the
//! same expression (WGSL's arithmetic and built-ins work on `vec4<f32>` as on `f32`), and a
//! partial last run falls back to single elements. Nothing in the generated body computes an
//! offset: operands are addressed by coordinates only.
//!
//! An operand can be updated in place (an optimiser's parameters and moments): its role is
//! named among the inputs *and* the outputs, and the kernel reads and writes it through one
//! read-write operand. Every input, the updated ones included, is loaded before the first
//! store, so each expression sees the old values.
//!
//! A [group](ElementwiseGroup) walks several such shapes in one dispatch — its members, each
//! with operands of its own and its own expressions, sharing the helpers, the scalars and the
//! operands outside the walk — its workgroups assigned to the members by ranges (see
//! `ops::group`): AdamW's step over many parameters of different shapes and layouts.
//!
//! The CPU twin ([`map_cpu`]) evaluates the same function in `f64` over the same coordinates.

use std::fmt::Write as _;

use fblayout_core::kernel::{KernelSource, Operand, ParamValue, Scalar};
use fblayout_core::layout::View;
use rayon::prelude::*;

use super::compiled::{Compiled, workgroups_for};
use super::error::OpError;
use super::group;
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::{LinearEntry, WORKGROUP_SIZE};
use crate::runtime::{Batch, Gpu};
use crate::tensor::GpuArg;

/// The entry point of every elementwise kernel.
pub(crate) const ENTRY: &str = "elementwise";

/// What an elementwise kernel computes.
pub(crate) struct Spec<'a> {
    /// The kernel's name.
    pub op: &'static str,
    /// The inputs: role and view. In the expressions an input's value is its role.
    pub inputs: Vec<(&'static str, &'a View)>,
    /// The outputs: role, view and WGSL expression. An output whose role is also an input is
    /// updated in place (one read-write operand; the input's view must be the output's).
    pub outputs: Vec<(&'static str, &'a View, String)>,
    /// Scalar parameters, `params.<name>` in the expressions.
    pub scalars: Vec<(&'static str, Scalar)>,
    /// WGSL functions the expressions call, written once for both widths: `{T}` stands for
    /// the value type (`f32` or `vec4<f32>`) and `{S}` for a suffix (`_1` or `_4`) that the
    /// function names and the expressions' calls carry.
    pub helpers: &'static str,
    /// Read-only operands outside the walk (role and view, of any shape), which the helpers
    /// read by their own coordinates (`<role>_load(..)`): a flag or a scalar on the device.
    /// They are bound after the walked operands.
    pub unwalked: Vec<(&'static str, &'a View)>,
}

/// A built elementwise kernel.
#[derive(Debug, Clone)]
pub(crate) struct Elementwise {
    compiled: Compiled,
    /// Every operand's role in binding order: the walked ones, then the unwalked.
    roles: Vec<&'static str>,
    /// How many of `roles` are walked.
    walked: usize,
    vector: bool,
}

/// The operands of one walk (an elementwise kernel, or a member of a group), checked and
/// built: in binding order (the inputs, updated ones read-write, then the outputs that are not
/// inputs), with their roles, the walked shape's rank, the role whose extents it walks (the
/// first output's) and whether every operand moves four elements at once.
struct Walked {
    operands: Vec<Operand>,
    roles: Vec<&'static str>,
    shape_of: &'static str,
    rank: usize,
    vector: bool,
}

impl Walked {
    /// Checks that every operand of the walk has one rank and that an operand updated in place
    /// is read and written through one view, and builds the operands.
    fn new(
        op: &'static str,
        inputs: &[(&'static str, &View)],
        outputs: &[(&'static str, &View, String)],
    ) -> Result<Self, OpError> {
        let updated = |role: &str| outputs.iter().any(|(r, _, _)| *r == role);
        for (role, view, _) in outputs {
            if let Some((_, input)) = inputs.iter().find(|(r, _)| r == role) {
                if input != view {
                    return Err(OpError::Unsupported {
                        op,
                        role,
                        view: view.name().to_owned(),
                        why: "it is updated in place, so it is read and written through one view"
                            .into(),
                    });
                }
            }
        }
        // The operands in binding order: the inputs (updated ones read-write), then the outputs
        // that are not inputs.
        let all: Vec<(&'static str, &View)> = inputs
            .iter()
            .copied()
            .chain(
                outputs
                    .iter()
                    .filter(|(r, _, _)| !inputs.iter().any(|(i, _)| i == r))
                    .map(|(r, v, _)| (*r, *v)),
            )
            .collect();
        let (first_role, first) = outputs
            .first()
            .map(|(r, v, _)| (*r, *v))
            .ok_or_else(|| OpError::shape(op, "an elementwise kernel needs an output"))?;
        let rank = check_same_shape(op, (first_role, first), &all)?;
        let last = rank.checked_sub(1);
        let mut operands = Vec::with_capacity(all.len());
        for (i, (role, view)) in all.iter().enumerate() {
            let operand = if i < inputs.len() && !updated(role) {
                Operand::read(role, view)?
            } else {
                Operand::write(role, view)?
            };
            operands.push(match last {
                Some(axis) => operand.vectorized(axis),
                None => operand,
            });
        }
        let vector = last.is_some() && operands.iter().all(|o| o.vector_axis() == last);
        Ok(Self {
            operands,
            roles: all.iter().map(|(r, _)| *r).collect(),
            shape_of: first_role,
            rank,
            vector,
        })
    }
}

impl Elementwise {
    /// Checks that all operands have one rank and builds the kernel.
    pub(crate) fn new(gpu: &Gpu, spec: Spec<'_>) -> Result<Self, OpError> {
        let walked = Walked::new(spec.op, &spec.inputs, &spec.outputs)?;
        let Walked {
            operands,
            mut roles,
            shape_of,
            rank,
            vector,
        } = walked;
        let (count, walk) = walk(&spec.inputs, &spec.outputs, shape_of, rank, vector);
        let body = format!("{}{walk}}}\n", LINEAR.open(&count));
        let mut source = KernelSource::new(spec.op);
        for o in operands {
            source = source.operand(o);
        }
        for (role, view) in &spec.unwalked {
            source = source.operand(Operand::read(role, view)?);
        }
        for (name, scalar) in &spec.scalars {
            source = source.scalar(*name, *scalar);
        }
        let mut source = source.body(widths(spec.helpers, false));
        if vector {
            source = source.body(widths(spec.helpers, true));
        }
        let source = source.body(body);
        let walked = roles.len();
        roles.extend(spec.unwalked.iter().map(|(r, _)| *r));
        Ok(Self {
            compiled: Compiled::new(spec.op, gpu, source)?,
            roles,
            walked,
            vector,
        })
    }

    /// Whether the kernel moves four elements per invocation.
    pub(crate) fn is_vectorized(&self) -> bool {
        self.vector
    }

    /// The shader.
    pub(crate) fn source(&self) -> &str {
        self.compiled.module().source()
    }

    /// Records the kernel over `args` (one per operand: the inputs, then the outputs that are
    /// not updated inputs, all of one shape; then the unwalked operands).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        op: &'static str,
        args: &[&GpuArg<'_>],
        scalars: &[(&str, ParamValue)],
    ) -> Result<(), OpError> {
        if args.len() != self.roles.len() {
            return Err(OpError::shape(
                op,
                format!(
                    "{} arguments for the operands {}",
                    args.len(),
                    self.roles.join(", ")
                ),
            ));
        }
        let units = units(
            op,
            &self.roles[..self.walked],
            &args[..self.walked],
            self.vector,
        )?;
        let named: Vec<(&'static str, &GpuArg<'_>)> = self
            .roles
            .iter()
            .copied()
            .zip(args.iter().copied())
            .collect();
        self.compiled.record_linear(
            batch,
            ENTRY,
            &named,
            scalars,
            workgroups_for(op, u64::from(units))?,
        )
    }
}

/// The invocations of a walk over `args` (the walked operands `roles`, all of one shape):
/// one per element, or per run of four along the last axis where `vector`.
fn units(
    op: &'static str,
    roles: &[&'static str],
    args: &[&GpuArg<'_>],
    vector: bool,
) -> Result<u32, OpError> {
    let dims = check_same_dims(op, roles, args.iter().map(|a| a.dims()))?;
    let mut units: u64 = 1;
    for (d, &n) in dims.iter().enumerate() {
        let n = if vector && d + 1 == dims.len() {
            n.div_ceil(4)
        } else {
            n
        };
        units *= n as u64;
    }
    u32::try_from(units)
        .map_err(|_| OpError::shape(op, format!("{dims:?} has more than 2^32 elements")))
}

/// One member of a [`GroupSpec`]: inputs and outputs of one logical shape, as in a [`Spec`],
/// with roles of its own (no two members share one).
pub(crate) struct Member<'a> {
    /// The inputs: role and view.
    pub inputs: Vec<(&'static str, &'a View)>,
    /// The outputs: role, view and WGSL expression (see [`Spec::outputs`]).
    pub outputs: Vec<(&'static str, &'a View, String)>,
}

/// What a group of elementwise walks computes in one dispatch (see the module docs).
pub(crate) struct GroupSpec<'a> {
    /// The kernel's name.
    pub op: &'static str,
    /// The walks, from one to [`group::MAX_MEMBERS`].
    pub members: Vec<Member<'a>>,
    /// Scalar parameters, `params.<name>` in the expressions.
    pub scalars: Vec<(&'static str, Scalar)>,
    /// WGSL functions the expressions call (see [`Spec::helpers`]).
    pub helpers: &'static str,
    /// Read-only operands outside the walks (see [`Spec::unwalked`]), bound after the members'.
    pub unwalked: Vec<(&'static str, &'a View)>,
    /// Where given, a WGSL `bool` expression (over the unwalked operands and the scalars)
    /// under which the dispatch does nothing: every invocation returns before it reads a
    /// walked operand.
    pub skip: Option<&'static str>,
}

/// A built group of elementwise walks (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct ElementwiseGroup {
    compiled: Compiled,
    /// Each member's walked roles in binding order, and whether it moves four elements at
    /// once.
    members: Vec<(Vec<&'static str>, bool)>,
    /// The unwalked operands' roles.
    unwalked: Vec<&'static str>,
}

impl ElementwiseGroup {
    /// Checks every member (one rank each, updates in place through one view) and builds the
    /// kernel.
    pub(crate) fn new(gpu: &Gpu, spec: GroupSpec<'_>) -> Result<Self, OpError> {
        let n = spec.members.len();
        if !(1..=group::MAX_MEMBERS).contains(&n) {
            return Err(OpError::shape(
                spec.op,
                format!("a group has 1 to {} members, not {n}", group::MAX_MEMBERS),
            ));
        }
        let mut source = KernelSource::new(spec.op);
        let mut members = Vec::with_capacity(n);
        let mut functions = String::new();
        for (i, member) in spec.members.iter().enumerate() {
            let w = Walked::new(spec.op, &member.inputs, &member.outputs)?;
            let (count, walk) = walk(
                &member.inputs,
                &member.outputs,
                w.shape_of,
                w.rank,
                w.vector,
            );
            let i_name = LINEAR.index();
            let _ = write!(
                functions,
                "fn {MEMBER}{i}({i_name}: u32) {{\n    if ({i_name} >= {count}) {{\n        \
                 return;\n    }}\n{walk}}}\n"
            );
            for o in w.operands {
                source = source.operand(o);
            }
            members.push((w.roles, w.vector));
        }
        for (role, view) in &spec.unwalked {
            source = source.operand(Operand::read(role, view)?);
        }
        for (name, scalar) in &spec.scalars {
            source = source.scalar(*name, *scalar);
        }
        for i in 0..n {
            source = source.scalar(group::end(i), Scalar::U32);
        }
        let mut source = source.body(widths(spec.helpers, false));
        if members.iter().any(|(_, vector)| *vector) {
            source = source.body(widths(spec.helpers, true));
        }
        let source = source.body(functions).body(group_entry(n, spec.skip));
        Ok(Self {
            compiled: Compiled::new(spec.op, gpu, source)?,
            members,
            unwalked: spec.unwalked.iter().map(|(r, _)| *r).collect(),
        })
    }

    /// Whether member `i` moves four elements per invocation.
    pub(crate) fn is_vectorized(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|(_, vector)| *vector)
    }

    /// The shader.
    pub(crate) fn source(&self) -> &str {
        self.compiled.module().source()
    }

    /// Records the kernel over `members` (for each member, one argument per walked operand in
    /// its binding order: the inputs, then the outputs that are not updated inputs, all of one
    /// shape) and `unwalked` (one per unwalked operand).
    pub(crate) fn record(
        &self,
        batch: &mut Batch<'_>,
        op: &'static str,
        members: &[Vec<&GpuArg<'_>>],
        unwalked: &[&GpuArg<'_>],
        scalars: &[(&str, ParamValue)],
    ) -> Result<(), OpError> {
        if members.len() != self.members.len() || unwalked.len() != self.unwalked.len() {
            return Err(OpError::shape(
                op,
                format!(
                    "the kernel was built for {} members and {} other operands; {} and {} \
                     were given",
                    self.members.len(),
                    self.unwalked.len(),
                    members.len(),
                    unwalked.len()
                ),
            ));
        }
        let mut named: Vec<(&'static str, &GpuArg<'_>)> = Vec::new();
        let mut counts = Vec::with_capacity(members.len());
        for ((roles, vector), args) in self.members.iter().zip(members) {
            if args.len() != roles.len() {
                return Err(OpError::shape(
                    op,
                    format!(
                        "{} arguments for the operands {}",
                        args.len(),
                        roles.join(", ")
                    ),
                ));
            }
            counts.push(workgroups_for(
                op,
                u64::from(units(op, roles, args, *vector)?),
            )?);
            named.extend(roles.iter().copied().zip(args.iter().copied()));
        }
        named.extend(self.unwalked.iter().copied().zip(unwalked.iter().copied()));
        let (ends, total) = group::ends(op, counts)?;
        let scalars: Vec<(&str, ParamValue)> = scalars
            .iter()
            .copied()
            .chain(ends.iter().map(|(n, v)| (n.as_str(), *v)))
            .collect();
        self.compiled
            .record_linear(batch, ENTRY, &named, &scalars, total)
    }
}

/// The function of member `i` of a group is `ew_member<i>`, over the member's linear index.
const MEMBER: &str = "ew_member";

/// The entry point of a group of `members` walks: each workgroup finds its member from the
/// ranges and calls the member's function for each of its invocations, unless `skip` holds.
fn group_entry(members: usize, skip: Option<&str>) -> String {
    let prefix = LINEAR.prefix;
    let mut s = format!(
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn {ENTRY}(\n\
         \x20   @builtin(workgroup_id) {prefix}_wg: vec3<u32>,\n\
         \x20   @builtin(num_workgroups) {prefix}_nwg: vec3<u32>,\n\
         \x20   @builtin(local_invocation_index) {prefix}_lid: u32,\n\
         ) {{\n"
    );
    let g = format!("{prefix}_group");
    let _ = writeln!(
        s,
        "    let {g} = {prefix}_wg.x + {prefix}_wg.y * {prefix}_nwg.x;"
    );
    s += &group::past_the_end(&g, members);
    if let Some(skip) = skip {
        let _ = writeln!(s, "    if ({skip}) {{\n        return;\n    }}");
    }
    s += &group::members_chain(&g, members, |i, local| {
        let local = if local.contains(' ') {
            format!("({local})")
        } else {
            local.to_owned()
        };
        format!("        {MEMBER}{i}({local} * {WORKGROUP_SIZE}u + {prefix}_lid);\n")
    });
    s.push_str("\n}\n");
    s
}

/// Checks that every view of `views` has the rank of `first` and, along every axis where both
/// extents are static, its extent; returns the rank.
pub(crate) fn check_same_shape(
    op: &'static str,
    (first_role, first): (&str, &View),
    views: &[(&str, &View)],
) -> Result<usize, OpError> {
    let rank = first.axes().len();
    for (role, view) in views {
        if view.axes().len() != rank {
            return Err(OpError::shape(
                op,
                format!(
                    "`{role}` has rank {}, `{first_role}` rank {rank}",
                    view.axes().len()
                ),
            ));
        }
        for (d, (a, b)) in view.axes().iter().zip(first.axes()).enumerate() {
            if let (Some(n), Some(m)) = (a.extent.as_static(), b.extent.as_static()) {
                if n != m {
                    return Err(OpError::shape(
                        op,
                        format!("axis {d} of `{role}` has extent {n}, of `{first_role}` {m}"),
                    ));
                }
            }
        }
    }
    Ok(rank)
}

/// Checks that every argument has the first one's shape; returns it.
pub(crate) fn check_same_dims(
    op: &'static str,
    roles: &[&'static str],
    dims: impl Iterator<Item = Vec<usize>>,
) -> Result<Vec<usize>, OpError> {
    let dims: Vec<Vec<usize>> = dims.collect();
    if dims.len() != roles.len() {
        return Err(OpError::shape(
            op,
            format!(
                "{} arguments given for {} operands",
                dims.len(),
                roles.len()
            ),
        ));
    }
    let out = roles.len() - 1;
    for (role, d) in roles.iter().zip(&dims) {
        if d != &dims[out] {
            return Err(OpError::shape(
                op,
                format!("`{role}` has shape {d:?}, `{}` {:?}", roles[out], dims[out]),
            ));
        }
    }
    Ok(dims[out].clone())
}

/// `template` (see [`Spec::helpers`]) for one width.
pub(crate) fn widths(template: &str, vector: bool) -> String {
    let (ty, suffix) = if vector {
        ("vec4<f32>", "_4")
    } else {
        ("f32", "_1")
    };
    template.replace("{T}", ty).replace("{S}", suffix)
}

/// How every elementwise entry point names its index and coordinates.
const LINEAR: LinearEntry<'static> = LinearEntry {
    name: ENTRY,
    prefix: "ew",
};

/// The walk of `inputs` and `outputs` over the extents of operand `shape_of` (rank `rank`, the
/// last axis in runs of four where `vector`): the count of its invocations (a WGSL `u32`
/// expression), and the statements that decode [`LINEAR`]'s index into a coordinate, load
/// every input there and store every output (indented one level; the caller opens and closes
/// the function, and returns the invocations at or past the count).
fn walk(
    inputs: &[(&'static str, &View)],
    outputs: &[(&'static str, &View, String)],
    shape_of: &str,
    rank: usize,
    vector: bool,
) -> (String, String) {
    let entry = LINEAR;
    let dim = |d: usize| format!("{shape_of}_dim{d}()");
    // Invocations walk the shape with the last axis in units of four when wide.
    let mut units: Vec<String> = (0..rank).map(dim).collect();
    if vector {
        units[rank - 1] = format!("(({} + 3u) >> 2u)", dim(rank - 1));
    }
    let count = if units.is_empty() {
        "1u".to_owned()
    } else {
        units.join(" * ")
    };
    let mut s = String::new();
    s += &entry.decode(&units);
    let coords: Vec<String> = (0..rank).map(|d| entry.coord(d)).collect();
    let at = |last: &str| -> String {
        let mut c = coords.clone();
        if let Some(l) = c.last_mut() {
            *l = last.to_owned();
        }
        c.join(", ")
    };
    let body = |load: &str, store: &str, coords: &str, indent: &str| {
        let suffix = if load == "load4" { "_4" } else { "_1" };
        let mut b = String::new();
        for (role, _) in inputs {
            let _ = writeln!(b, "{indent}let {role} = {role}_{load}({coords});");
        }
        for (role, _, expr) in outputs {
            let sep = if coords.is_empty() { "" } else { ", " };
            let expr = expr.replace("{S}", suffix);
            let _ = writeln!(b, "{indent}{role}_{store}({coords}{sep}{expr});");
        }
        b
    };
    if vector {
        let last = coords[rank - 1].clone();
        let _ = writeln!(s, "    let ew_first = {last} * 4u;");
        let _ = writeln!(s, "    if (ew_first + 3u < {}) {{", dim(rank - 1));
        s += &body("load4", "store4", &at("ew_first"), "        ");
        let _ = writeln!(s, "    }} else {{");
        let _ = writeln!(
            s,
            "        for (var ew_l = ew_first; ew_l < {}; ew_l = ew_l + 1u) {{",
            dim(rank - 1)
        );
        s += &body("load", "store", &at("ew_l"), "            ");
        let _ = writeln!(s, "        }}\n    }}");
    } else {
        s += &body("load", "store", &coords.join(", "), "    ");
    }
    (count, s)
}

/// Checks that the CPU operands `inputs` and `outputs` all have the first output's shape;
/// returns it.
pub(crate) fn check_cpu_shapes<T>(
    op: &'static str,
    inputs: &[&dyn Logical<T>],
    outputs: &[&mut dyn LogicalMut<T>],
) -> Result<Vec<usize>, OpError> {
    let dims: Vec<usize> = outputs
        .first()
        .map(|o| o.dims().to_vec())
        .ok_or_else(|| OpError::shape(op, "no output"))?;
    for (i, d) in inputs
        .iter()
        .map(|a| a.dims())
        .chain(outputs.iter().map(|o| o.dims()))
        .enumerate()
    {
        if d != dims.as_slice() {
            return Err(OpError::shape(
                op,
                format!("operand {i} has shape {d:?}, the output {dims:?}"),
            ));
        }
    }
    Ok(dims)
}

/// The CPU twin of an elementwise kernel: `f(inputs, outputs)` at every coordinate, in `f64`,
/// in parallel. `inputs` and `outputs` are read and written through their addressing; all have
/// one shape. Each output's slot holds the output's current value when `f` is called, so an
/// update in place reads its old value there.
pub(crate) fn map_cpu<T: Real>(
    op: &'static str,
    inputs: &[&dyn Logical<T>],
    outputs: &mut [&mut dyn LogicalMut<T>],
    f: impl Fn(&[f64], &mut [f64]) + Sync,
) -> Result<(), OpError> {
    let dims = check_cpu_shapes(op, inputs, outputs)?;
    let n: usize = dims.iter().product();
    let n_out = outputs.len();
    let current: Vec<&dyn Logical<T>> = outputs.iter().map(|o| &**o as &dyn Logical<T>).collect();
    let dense: Vec<f64> = (0..n)
        .into_par_iter()
        .flat_map_iter(|linear| {
            let mut index = vec![0usize; dims.len()];
            let mut rest = linear;
            for d in (0..dims.len()).rev() {
                index[d] = rest % dims[d];
                rest /= dims[d];
            }
            let args: Vec<f64> = inputs.iter().map(|a| a.get(&index).to_f64()).collect();
            let mut out: Vec<f64> = current.iter().map(|o| o.get(&index).to_f64()).collect();
            f(&args, &mut out);
            out
        })
        .collect();
    for (k, o) in outputs.iter_mut().enumerate() {
        let values: Vec<T> = dense
            .iter()
            .skip(k)
            .step_by(n_out)
            .map(|&v| T::from_f64(v))
            .collect();
        o.scatter(&values);
    }
    Ok(())
}
