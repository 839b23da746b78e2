//! The WGSL of the cooperative-matrix GEMM, generated for one [`CoopConfig`] and the
//! operands' staging orders.
//!
//! One workgroup computes a `block_m × block_n` block of C for one product of the batch (the
//! third grid axis). Its subgroups tile the block: each owns `frags_m × frags_n` accumulator
//! fragments of 16×16. Per k-step every invocation loads a few elements of the next A and B
//! blocks into registers (four neighbours at a time along the axis the operand is contiguous
//! in, as the kernel surface granted, else single elements) straight from the storage binding
//! as the f16 they are stored in (no round trip through f32) and stores them into workgroup
//! memory; every subgroup then loads its fragments from there and
//! multiplies. With two stages the loads of step `t + 1` are in flight while step `t`
//! multiplies, with one barrier per step.
//!
//! A block is staged in the order the operand is read fastest in ([`Order`]): an operand
//! contiguous along its outer axis (`m` of A, `n` of B) is staged `[k][outer]`, one contiguous
//! along `k` `[outer][k]`. The fragment load then says how the staged block is laid out:
//! `coopLoadT` (naga's row-major load: element `(r, c)` at `r · stride + c`) when a fragment's
//! rows are the staged rows, `coopLoad` (column-major) when they are its columns. So a
//! transposed view costs nothing: it only swaps which of the two loads a fragment uses. Rows of
//! the staged blocks carry 8 spare elements so that a fragment's rows start on different banks
//! and every row stays 16-byte aligned.
//!
//! Workgroup memory is declared as `vec4<f16>`s ([`VEC`] elements each): a lane that read four
//! neighbours stores them with one 8-byte store instead of four 2-byte ones (a quarter of the
//! store instructions and half the shared-memory wavefronts), and single elements go in as one
//! component. The fragment loads then point at a `vec4<f16>` and count their offsets and
//! strides in vectors: SPIR-V's cooperative-matrix load counts `Stride` in the pointee's type,
//! here the vector, and reads the matrix's elements from its components. Every staged row,
//! stage and fragment origin is a whole number of vectors (rows are multiples of 8 elements
//! long, origins multiples of 16).
//!
//! Edges are masked where blocks are staged: coordinates past `m` or `n` are clamped to the
//! last row or column (their outputs are never stored), and elements past `k` are zeros, so
//! neither padding nor NaN reaches a sum. Only a last, partial k-step needs the zeros: the
//! loads of every step wholly inside `k` are emitted a second time without the comparison and
//! select per load, and a branch uniform over the workgroup picks them. Where C is row- or column-major with 16-aligned rows
//! (columns) and of the accumulator's type ([`Direct`]), a block that lies wholly inside C
//! stores each fragment straight into C (`coopStoreT`/`coopStore` on `c_data`, the stride
//! read from C's index function). Every other block, and every other C, sends each
//! accumulator through a per-subgroup 16×16 scratch in workgroup memory (`coopStoreT`, two
//! barriers) and from there to C through `c_store`, guarded by C's extents, so C may have any
//! layout and any extents. The scratch is the subgroup's own, so on a device with subgroup
//! operations its barriers are `subgroupBarrier()` ([`Lanes`]): only its owner waits, where a
//! `workgroupBarrier()` would hold every subgroup of the workgroup twice per fragment (naga
//! gives the subgroup barrier acquire-release semantics at subgroup scope; the scratch's
//! readers are the lanes of the subgroup that stored it, and the crate's GPU tests check every
//! output element of such products against `f64` sums); where C grants aligned runs of four along `n` (an `f16` activation
//! of a mixed-precision step, rows padded to a multiple of 8 included), each lane moves four
//! neighbours per `c_store4`, one index evaluation for four elements.
//!
//! An added product (`C = A·B + D`, D of C's extents read through its own view) sends every
//! block through the subgroup's scratch and adds D to each element as a lane takes it from
//! there into C (one `d_load4` per `c_store4` where D grants runs of four along `n`): the
//! addition after the product (a gradient's sum of two contributions) takes no pass of its
//! own. Under split-k the reduction adds D.
//!
//! A biased product (`C = A·B + bias`, `bias[n]` in every row) starts every accumulator as its
//! columns' bias, staged through the same scratch, so the sums leave the k-loop biased and
//! every store above, the straight one included, writes them as they are: the straight store
//! stays on. (A fragment has no elementwise addition of a vector, and an epilogue adding the
//! bias per element would have to send every block through the scratch.) Under split-k the
//! partial sums are unbiased and the reduction adds the bias, once.
//!
//! With split-k ([`Output::Partial`]) the third grid axis also runs over the parts of the
//! reduction (`part = z % splits`); a workgroup reduces `k` from `part · split_len` to the
//! next part's start (or `k`) and stores every fragment straight into the workspace of partial
//! sums `[product, part, rows, cols]` (`coopStoreT` on `partial_data`, the stride read from the
//! workspace's index function): the workspace is padded to whole blocks, so every block lies
//! inside it. The reduction kernel (the f32 GEMM's, shared) then writes C.
//!
//! naga 30's SPIR-V writer panics ("Expression [..] is not cached") when the index inside a
//! `coopLoad`/`coopStore` pointer or its stride is an inline expression. Every such index and
//! stride is therefore bound to a `let` first; the crate's tests pass every configuration
//! through the SPIR-V writer.

use std::fmt::Write as _;

use super::config::CoopConfig;
use crate::ops::matmul::Merge;

/// The entry point.
pub(crate) const ENTRY: &str = "coop_matmul";

/// Spare elements at the end of each staged row.
pub(crate) const ROW_PAD: u32 = 8;

/// Elements of one `vec4<f16>` of the staged blocks in workgroup memory.
const VEC: u32 = 4;

/// `elements` of a staged block as a count of its vectors (every staged length and offset is a
/// whole number of them; see the module docs).
fn vecs(elements: u32) -> u32 {
    debug_assert!(
        elements.is_multiple_of(VEC),
        "{elements} is no whole number of vectors"
    );
    elements / VEC
}

/// How an operand's block is laid out in workgroup memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// `[outer][k]`: rows along the outer axis (`m` of A, `n` of B), `k` contiguous.
    OuterRows,
    /// `[k][outer]`: rows along `k`, the outer axis contiguous.
    KRows,
}

/// How an operand's elements are read from its tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Width {
    /// Four neighbours along the staged rows' contiguous axis (`<role>_load4`).
    Four,
    /// One element at a time.
    One,
}

/// One operand's staging: its order and how it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Staging {
    pub order: Order,
    pub width: Width,
    /// Whether the operand's offsets step evenly along `k` by the configuration's k-step
    /// ([`ValidIndexFn::steps_evenly`](fblayout_core::expr::ValidIndexFn::steps_evenly)):
    /// each lane then evaluates its elements' offsets once, at the first k-step, and adds
    /// the k-step's distance times the step's number, where it would otherwise evaluate the
    /// index function per element and step.
    pub stepped: bool,
}

/// The subgroups a kernel is generated for: their size (fixed on the adapter) and how a
/// subgroup waits for its own lanes around its scratch in workgroup memory (the bias seed and
/// the guarded epilogue, see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lanes {
    /// Lanes per subgroup.
    pub size: u32,
    /// `subgroupBarrier()` (on devices with subgroup operations): only the subgroup that owns
    /// the scratch waits, and the others go on multiplying or storing. Otherwise
    /// `workgroupBarrier()`, which holds every subgroup of the workgroup at each fragment.
    pub subgroup_barrier: bool,
}

impl Lanes {
    /// Subgroups of `size` lanes that wait for each other with workgroup barriers (a device
    /// without subgroup operations).
    pub const fn new(size: u32) -> Self {
        Self {
            size,
            subgroup_barrier: false,
        }
    }

    /// The same subgroups waiting with `subgroupBarrier()` where `on`.
    pub const fn subgroup_barrier(self, on: bool) -> Self {
        Self {
            subgroup_barrier: on,
            ..self
        }
    }

    /// The statement with which a subgroup waits for its own lanes around its scratch.
    fn scratch_barrier(self) -> &'static str {
        if self.subgroup_barrier {
            "subgroupBarrier();"
        } else {
            "workgroupBarrier();"
        }
    }
}

/// What one kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CoopSpec {
    pub config: CoopConfig,
    /// The adapter's subgroups.
    pub lanes: Lanes,
    /// Leading batch axes (0 to 3).
    pub batch_axes: usize,
    pub a: Staging,
    pub b: Staging,
    /// Where the sums go.
    pub output: Output,
    /// How the scratch's elements go into C where they go through it: four neighbours along
    /// `n` per `c_store4` ([`Width::Four`], where C grants aligned runs of four along `n` and
    /// no fragment goes straight into it), or one at a time.
    pub c_width: Width,
    /// Whether C gets a bias (operand `bias`, `[n]`): with [`Output::C`] every accumulator
    /// starts as its columns' bias; split-k's reduction adds it to the parts' sum instead.
    pub bias: bool,
    /// Whether C gets D added (operand `d`, C's extents): with [`Output::C`] (never straight:
    /// [`Direct`] is `None`) each element is added as it leaves the scratch; split-k's
    /// reduction adds it instead.
    pub added: Added,
}

/// Whether, and how, an added product reads D as each element leaves the scratch, and how D
/// joins the sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Added {
    /// No D.
    No,
    /// D element by element (`d_load`).
    One(Merge),
    /// D four neighbours along `n` at a time where C is written so (`d_load4`; [`Width::Four`]).
    Four(Merge),
}

/// Where a kernel's sums go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Output {
    /// Into C, interior blocks straight where they can ([`Direct`]).
    C(Option<Direct>),
    /// Into split-k's workspace of partial sums (operand `partial`, scalars `splits` and
    /// `split_len`).
    Partial,
}

impl CoopSpec {
    /// The name of the end of this workgroup's part of `k` (elements past it are zeros).
    fn k_end(&self) -> &'static str {
        match self.output {
            Output::C(_) => "cm_k_len",
            Output::Partial => "cm_k_end",
        }
    }
}

/// How a fragment is stored straight into C (`coopStoreT`/`coopStore` on `c_data`): for a C
/// whose offsets are affine in `(m, n)` with 16 consecutive elements along one of them
/// contiguous and 16-aligned, and whose element type is the accumulator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Direct {
    /// Rows along `m`, `n` contiguous (row-major): `coopStoreT`, the stride between rows.
    Rows,
    /// `m` contiguous (column-major): `coopStore`, the stride between columns.
    Cols,
}

/// The row length (with padding) and the number of rows of a staged block of `outer × k`.
fn staged_shape(order: Order, outer: u32, k: u32) -> (u32, u32) {
    match order {
        Order::OuterRows => (k + ROW_PAD, outer),
        Order::KRows => (outer + ROW_PAD, k),
    }
}

/// Elements of workgroup memory one stage of an operand's block takes.
pub(crate) fn staged_elements(order: Order, outer: u32, k: u32) -> u32 {
    let (row, rows) = staged_shape(order, outer, k);
    row * rows
}

fn batch_coords(batch_axes: usize) -> String {
    (0..batch_axes).map(|d| format!("cm_b{d}, ")).collect()
}

/// The coordinates of element `(outer, k)` of operand `role` (A is `[m, k]`, B is `[k, n]`).
fn at(role: &str, batch: &str, outer: &str, k: &str) -> String {
    if role == "a" {
        format!("{batch}{outer}, {k}")
    } else {
        format!("{batch}{k}, {outer}")
    }
}

/// The register declarations, the loads (from the block at `cm_k0`) and the stores (into
/// stage `cm_buf`) of operand `role`. The loads come twice: `load` masks elements past the end
/// of `k` to zeros, `load_whole` is for a block that lies wholly inside `k` and reads every
/// element as it is, without a comparison or a select per load.
struct Stage {
    declare: String,
    load: String,
    load_whole: String,
    store: String,
}

fn stage(role: &str, staging: Staging, outer: u32, spec: &CoopSpec) -> Stage {
    let c = spec.config;
    let threads = c.invocations(spec.lanes.size);
    let k_step = c.k_step;
    let bc = batch_coords(spec.batch_axes);
    let (row_len, rows) = staged_shape(staging.order, outer, k_step);
    let stage_len = row_len * rows;
    let cols = row_len - ROW_PAD;
    let w = match staging.width {
        Width::Four => 4,
        Width::One => 1,
    };
    let per_row = cols / w;
    let items = rows * per_row;
    let per_thread = items.div_ceil(threads);
    let tile = format!("cm_{role}_tile");
    let k_end = spec.k_end();
    let (origin, last) = if role == "a" {
        ("cm_m0", "cm_m_last")
    } else {
        ("cm_n0", "cm_n_last")
    };
    // A and B are f16 in memory: the registers hold the stored elements as they are.
    let ty = if w == 4 { "vec4<f16>" } else { "f16" };
    let mut st = Stage {
        declare: String::new(),
        load: String::new(),
        load_whole: String::new(),
        store: String::new(),
    };
    if staging.stepped {
        // The distance of one k-step, the same everywhere (so measured at the origin, inside
        // the tensor whenever there is a second step), and this step's multiple of it.
        let zeros = "0u, ".repeat(spec.batch_axes);
        let _ = writeln!(
            st.declare,
            "    let cm_{role}_dk = {role}_at({}) - {role}_at({});",
            at(role, &zeros, "0u", &format!("{k_step}u")),
            at(role, &zeros, "0u", "0u"),
        );
        let shift = format!("        let cm_{role}_shift = (cm_k0 / {k_step}u) * cm_{role}_dk;\n");
        st.load += &shift;
        st.load_whole += &shift;
    }
    for i in 0..per_thread {
        let reg = format!("cm_{role}_reg{i}");
        let _ = writeln!(st.declare, "    var {reg}: {ty};");
        let guard = (i + 1) * threads > items;
        let e = format!("(cm_lid + {}u)", i * threads);
        let (open, close) = if guard {
            (format!("        if ({e} < {items}u) {{\n"), "        }\n")
        } else {
            (String::new(), "")
        };
        let ind = if guard { "            " } else { "        " };
        st.load += &open;
        st.load_whole += &open;
        st.store += &open;
        // e → (staged row, group along the row), the row fastest.
        let row = format!("({e} / {per_row}u)");
        let col = format!("(({e} % {per_row}u) * {w}u)");
        // Coordinates: along the outer axis and along k, clamped or masked (inside a whole
        // block, `k` needs neither).
        let k_whole = match staging.order {
            Order::OuterRows => format!("cm_k0 + {col}"),
            Order::KRows => format!("cm_k0 + {row}"),
        };
        let (outer_c, k_c, mask) = match (staging.order, w) {
            (Order::OuterRows, 4) => (
                format!("min({origin} + {row}, {last})"),
                format!("min(cm_k0 + {col}, cm_k_last4)"),
                format!(
                    "vec4<u32>(cm_k0 + {col}) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>({k_end})"
                ),
            ),
            (Order::OuterRows, _) => (
                format!("min({origin} + {row}, {last})"),
                format!("min(cm_k0 + {col}, cm_k_last)"),
                format!("cm_k0 + {col} < {k_end}"),
            ),
            (Order::KRows, 4) => (
                format!("min({origin} + {col}, {last}4)"),
                format!("min(cm_k0 + {row}, cm_k_last)"),
                format!("cm_k0 + {row} < {k_end}"),
            ),
            (Order::KRows, _) => (
                format!("min({origin} + {col}, {last})"),
                format!("min(cm_k0 + {row}, cm_k_last)"),
                format!("cm_k0 + {row} < {k_end}"),
            ),
        };
        // Straight from the storage binding (`<role>_data`, of `vec4<f16>` where the surface
        // granted wide reads), without `<role>_load`'s conversion to f32 and back.
        let (offset, offset_whole) = if staging.stepped {
            // The element's offset at the first k-step (`k` within the step, unclamped:
            // elements past `k` are masked), computed once.
            let k_in_step = match staging.order {
                Order::OuterRows => col.clone(),
                Order::KRows => row.clone(),
            };
            let first = at(role, &bc, &outer_c, &k_in_step);
            let _ = writeln!(st.declare, "    let cm_{role}_off{i} = {role}_at({first});");
            let offset = format!("(cm_{role}_off{i} + cm_{role}_shift)");
            (offset.clone(), offset)
        } else {
            (
                format!("{role}_at({})", at(role, &bc, &outer_c, &k_c)),
                format!("{role}_at({})", at(role, &bc, &outer_c, &k_whole)),
            )
        };
        let element = |offset: &str| -> String {
            if w == 4 {
                format!("{role}_data[{offset} >> 2u]")
            } else {
                format!("{role}_data[{offset}]")
            }
        };
        let zero = if w == 4 { "vec4<f16>(0.0h)" } else { "0.0h" };
        let _ = writeln!(
            st.load,
            "{ind}{reg} = select({zero}, {}, {mask});",
            element(&offset)
        );
        let _ = writeln!(st.load_whole, "{ind}{reg} = {};", element(&offset_whole));
        if w == 4 {
            // Four neighbours: one vector of the stage (`col` is a multiple of four).
            let _ = writeln!(
                st.store,
                "{ind}{{\n{ind}    let cm_s = cm_buf * {}u + {row} * {}u + ({e} % {per_row}u);\n{ind}    {tile}[cm_s] = {reg};\n{ind}}}",
                vecs(stage_len),
                vecs(row_len),
            );
        } else {
            // One element: one component of a vector.
            let _ = writeln!(
                st.store,
                "{ind}{{\n{ind}    let cm_s = cm_buf * {stage_len}u + {row} * {row_len}u + {col};\n{ind}    {tile}[cm_s >> 2u][cm_s & 3u] = {reg};\n{ind}}}"
            );
        }
        st.load += close;
        st.load_whole += close;
        st.store += close;
    }
    st
}

/// The loads of k-step `step` (at `cm_k0`) of both operands, indented one level more than the
/// stages wrote them: unmasked for a step wholly inside `k` (every step but a last, partial
/// one), masked for a partial step, none past the last step. Both conditions are uniform over
/// the workgroup.
fn step_loads(step: &str, a: &Stage, b: &Stage) -> String {
    let indent = |code: String| -> String { code.lines().map(|l| format!("    {l}\n")).collect() };
    format!(
        "        if ({step} < cm_whole_steps) {{\n{}        }} else if ({step} < cm_steps) {{\n{}        }}\n",
        indent(format!("{}{}", a.load_whole, b.load_whole)),
        indent(format!("{}{}", a.load, b.load)),
    )
}

/// The fragment load of operand `role` for fragment `f` at k-slice `kk`: `let` bindings of the
/// index and the fragment (the stride is `cm_{role}_stride`).
fn fragment_load(
    role: &str,
    order: Order,
    f: u32,
    kk: u32,
    row_len: u32,
    stage_len: u32,
) -> String {
    let base = format!("cm_{role}_base");
    let load = match (role, order) {
        // A fragment's rows are m (of A) or k (of B): the staged rows when A is staged
        // [m][k] or B [k][n], so the row-major load; otherwise the column-major one.
        ("a", Order::OuterRows) | ("b", Order::KRows) => "coopLoadT",
        _ => "coopLoad",
    };
    let role_ty = if role == "a" { "A" } else { "B" };
    // The offset of the fragment's origin within the stage, in vectors.
    let offset = vecs(match order {
        Order::OuterRows => f * 16 * row_len + kk * 16,
        Order::KRows => kk * 16 * row_len + f * 16,
    });
    let stage_vecs = vecs(stage_len);
    format!(
        "            let cm_{role}_at{f} = cm_buf * {stage_vecs}u + {base} + {offset}u;
            let cm_{role}{f} = {load}<coop_mat16x16<f16, {role_ty}>>(&cm_{role}_tile[cm_{role}_at{f}], cm_{role}_stride);\n"
    )
}

/// The kernel's body: workgroup memory and the entry point.
pub(crate) fn gemm(spec: &CoopSpec) -> String {
    let c = spec.config;
    let nb = spec.batch_axes;
    let acc = c.acc.wgsl();
    let (bm, bn, bk) = (c.block_m, c.block_n, c.k_step);
    let stages = c.stages;
    let threads = c.invocations(spec.lanes.size);
    let (sg_m, sg_n) = c.subgroup_grid();
    let subgroups = sg_m * sg_n;
    let a_len = staged_elements(spec.a.order, bm, bk);
    let b_len = staged_elements(spec.b.order, bn, bk);
    let (a_row, _) = staged_shape(spec.a.order, bm, bk);
    let (b_row, _) = staged_shape(spec.b.order, bn, bk);
    let partial = spec.output == Output::Partial;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Configuration: {c}; A staged {:?}, B staged {:?}; {} lanes per subgroup.
var<workgroup> cm_a_tile: array<vec4<f16>, {}>;
var<workgroup> cm_b_tile: array<vec4<f16>, {}>;",
        spec.a,
        spec.b,
        spec.lanes.size,
        vecs(a_len * stages),
        vecs(b_len * stages),
    );
    if !partial {
        let _ = writeln!(
            s,
            "var<workgroup> cm_out: array<{acc}, {}>;",
            subgroups * 256
        );
    }
    let _ = writeln!(
        s,
        "
@compute @workgroup_size({threads})
fn {ENTRY}(
    @builtin(workgroup_id) cm_wg: vec3<u32>,
    @builtin(local_invocation_index) cm_lid: u32,
) {{
    let cm_m_len = a_dim{nb}();
    let cm_k_len = a_dim{}();
    let cm_n_len = b_dim{}();
    var cm_z = cm_wg.z;",
        nb + 1,
        nb + 1,
    );
    if partial {
        s.push_str(
            "    let cm_split = cm_z % params.splits;
    cm_z = cm_z / params.splits;
    let cm_product = cm_z;
",
        );
    }
    for d in (1..nb).rev() {
        let _ = writeln!(
            s,
            "    let cm_b{d} = cm_z % a_dim{d}();\n    cm_z = cm_z / a_dim{d}();"
        );
    }
    if nb > 0 {
        s.push_str("    let cm_b0 = cm_z;\n");
    }
    let _ = writeln!(
        s,
        "    let cm_m0 = cm_wg.y * {bm}u;
    let cm_n0 = cm_wg.x * {bn}u;
    // Staged loads are clamped inside the tensor; elements past the end of k are zeros.
    let cm_m_last = max(cm_m_len, 1u) - 1u;
    let cm_n_last = max(cm_n_len, 1u) - 1u;
    let cm_k_last = max(cm_k_len, 1u) - 1u;
    let cm_m_last4 = cm_m_last - cm_m_last % 4u;
    let cm_n_last4 = cm_n_last - cm_n_last % 4u;
    let cm_k_last4 = cm_k_last - cm_k_last % 4u;
{}    // This subgroup's fragments: rows cm_sm.., columns cm_sn.. of the block.
    let cm_sg = cm_lid / {}u;
    let cm_lane = cm_lid % {}u;
    let cm_sm = (cm_sg / {sg_n}u) * {}u;
    let cm_sn = (cm_sg % {sg_n}u) * {}u;
    let cm_a_stride = {}u;
    let cm_b_stride = {}u;",
        if partial {
            format!(
                "    // This workgroup's part of the reduction: k from cm_k_begin to cm_k_end.
    let cm_k_begin = min(cm_split * params.split_len, cm_k_len);
    let cm_k_end = min(cm_k_begin + params.split_len, cm_k_len);
    let cm_steps = (cm_k_end - cm_k_begin + {}u) / {bk}u;
    let cm_whole_steps = (cm_k_end - cm_k_begin) / {bk}u;\n",
                bk - 1
            )
        } else {
            format!(
                "    let cm_steps = (cm_k_len + {}u) / {bk}u;\n    let cm_whole_steps = cm_k_len / {bk}u;\n",
                bk - 1
            )
        },
        spec.lanes.size,
        spec.lanes.size,
        16 * c.frags_m,
        16 * c.frags_n,
        vecs(a_row),
        vecs(b_row),
    );
    // The base offset of this subgroup's fragments within a stage, in vectors (`cm_sm` and
    // `cm_sn` are multiples of 16).
    let _ = writeln!(
        s,
        "    let cm_a_base = {};\n    let cm_b_base = {};",
        match spec.a.order {
            Order::OuterRows => format!("cm_sm * {}u", vecs(a_row)),
            Order::KRows => "cm_sm / 4u".to_owned(),
        },
        match spec.b.order {
            Order::OuterRows => format!("cm_sn * {}u", vecs(b_row)),
            Order::KRows => "cm_sn / 4u".to_owned(),
        }
    );
    for i in 0..c.frags_m {
        for j in 0..c.frags_n {
            let _ = writeln!(s, "    var cm_acc{i}_{j}: coop_mat16x16<{acc}, C>;");
        }
    }
    if spec.bias && !partial {
        s += &bias_seed(spec);
    }
    let sa = stage("a", spec.a, bm, spec);
    let sb = stage("b", spec.b, bn, spec);
    s += &sa.declare;
    s += &sb.declare;
    let k_origin = if partial { "cm_k_begin + " } else { "" };
    let _ = writeln!(
        s,
        "    {{\n        let cm_k0 = {};\n{}    }}",
        if partial { "cm_k_begin" } else { "0u" },
        step_loads("0u", &sa, &sb)
    );
    let buf = if stages == 2 { "cm_t & 1u" } else { "0u" };
    let _ = writeln!(
        s,
        "    for (var cm_t = 0u; cm_t < cm_steps; cm_t = cm_t + 1u) {{
        let cm_buf = {buf};"
    );
    if stages == 1 {
        // One stage: wait until every subgroup is done with the previous block.
        s.push_str("        workgroupBarrier();\n");
    }
    let _ = writeln!(
        s,
        "{}{}        workgroupBarrier();
        // The next step's loads are in flight while this step multiplies.
        let cm_k0 = {k_origin}(cm_t + 1u) * {bk}u;
{}",
        sa.store,
        sb.store,
        step_loads("cm_t + 1u", &sa, &sb)
    );
    for kk in 0..bk / 16 {
        s.push_str("        {\n");
        for i in 0..c.frags_m {
            s += &fragment_load("a", spec.a.order, i, kk, a_row, a_len);
        }
        for j in 0..c.frags_n {
            s += &fragment_load("b", spec.b.order, j, kk, b_row, b_len);
        }
        for i in 0..c.frags_m {
            for j in 0..c.frags_n {
                let _ = writeln!(
                    s,
                    "            cm_acc{i}_{j} = coopMultiplyAdd(cm_a{i}, cm_b{j}, cm_acc{i}_{j});"
                );
            }
        }
        s.push_str("        }\n");
    }
    s.push_str("    }\n");
    let (guarded, indent) = match spec.output {
        Output::Partial => {
            s += &partial_epilogue(spec);
            (String::new(), "")
        }
        Output::C(Some(direct)) => {
            s += &direct_epilogue(spec, direct);
            s.push_str("    } else {\n");
            (guarded_epilogue(spec, "    "), "    ")
        }
        Output::C(None) => (guarded_epilogue(spec, ""), ""),
    };
    s += &guarded;
    if !indent.is_empty() {
        s.push_str("    }\n");
    }
    s.push_str("}\n");
    s
}

/// The prologue of a biased product into C: every accumulator starts as the bias of its
/// columns, the same in every row, so that the multiply-adds leave `bias + Σ` in it and every
/// epilogue (the straight store included) writes the biased sum. Per column of fragments the
/// subgroup fills its 16×16 scratch with `bias[n]` of the fragment's columns (clamped to the
/// last column: columns past it are never stored) and loads each of its accumulators in that
/// column from there (`coopLoadT`, two barriers per column).
fn bias_seed(spec: &CoopSpec) -> String {
    let c = spec.config;
    let wait = spec.lanes.scratch_barrier();
    let acc = c.acc.wgsl();
    let mut s = String::from(
        "    // Every accumulator starts as its columns' bias.
    let cm_bo = cm_sg * 256u;
    let cm_bo_stride = 16u;\n",
    );
    // `bias_load` gives f32.
    let value = if c.acc == crate::runtime::CoopScalar::F32 {
        "bias_load(cm_n)".to_owned()
    } else {
        format!("{acc}(bias_load(cm_n))")
    };
    for j in 0..c.frags_n {
        let _ = writeln!(
            s,
            "    {wait}
    for (var cm_e = cm_lane; cm_e < 256u; cm_e = cm_e + {}u) {{
        let cm_n = min(cm_n0 + cm_sn + {}u + cm_e % 16u, cm_n_last);
        cm_out[cm_bo + cm_e] = {value};
    }}
    {wait}",
            spec.lanes.size,
            16 * j,
        );
        for i in 0..c.frags_m {
            let _ = writeln!(
                s,
                "    cm_acc{i}_{j} = coopLoadT<coop_mat16x16<{acc}, C>>(&cm_out[cm_bo], cm_bo_stride);"
            );
        }
    }
    s
}

/// The epilogue of any C: each fragment through the subgroup's scratch into C, guarded by C's
/// extents (two barriers per fragment), every line indented by `extra`.
fn guarded_epilogue(spec: &CoopSpec, extra: &str) -> String {
    let c = spec.config;
    let wait = spec.lanes.scratch_barrier();
    let nb = spec.batch_axes;
    let bc = batch_coords(nb);
    let mut s = String::new();
    let m_dim = format!("c_dim{nb}()");
    let n_dim = format!("c_dim{}()", nb + 1);
    // D's element at `(cm_m, n)`, and its four from `(cm_m, cm_n)`, added where there is one.
    // `value` joined with D's element at `(cm_m, n)`, and with its four from `(cm_m, cm_n)`.
    let d_one = |value: &str, n: &str| match spec.added {
        Added::No => value.to_owned(),
        Added::One(m) | Added::Four(m) => m.wgsl(value, &format!("d_load({bc}cm_m, {n})"), false),
    };
    let d_four = |value: &str| match spec.added {
        Added::No => value.to_owned(),
        Added::One(m) => {
            let each: Vec<String> = (0..4)
                .map(|t| format!("d_load({bc}cm_m, cm_n + {t}u)"))
                .collect();
            m.wgsl(value, &format!("vec4<f32>({})", each.join(", ")), true)
        }
        Added::Four(m) => m.wgsl(value, &format!("d_load4({bc}cm_m, cm_n)"), true),
    };
    let _ = writeln!(
        s,
        "    let cm_o = cm_sg * 256u;\n    let cm_o_stride = 16u;"
    );
    for i in 0..c.frags_m {
        for j in 0..c.frags_n {
            let _ = writeln!(
                s,
                "    {wait}
    coopStoreT(cm_acc{i}_{j}, &cm_out[cm_o], cm_o_stride);
    {wait}"
            );
            let (sg, fm, fn_) = (spec.lanes.size, 16 * i, 16 * j);
            match spec.c_width {
                Width::One => {
                    let _ = writeln!(
                        s,
                        "    for (var cm_e = cm_lane; cm_e < 256u; cm_e = cm_e + {sg}u) {{
        let cm_m = cm_m0 + cm_sm + {fm}u + cm_e / 16u;
        let cm_n = cm_n0 + cm_sn + {fn_}u + cm_e % 16u;
        if (cm_m < {m_dim} && cm_n < {n_dim}) {{
            c_store({bc}cm_m, cm_n, {});
        }}
    }}",
                        d_one("f32(cm_out[cm_o + cm_e])", "cm_n")
                    );
                }
                // Four neighbours along n a lane: the fragment's 64 runs of four start at
                // multiples of 4 from the block's origin, where C's runs are aligned.
                Width::Four => {
                    let _ = writeln!(
                        s,
                        "    for (var cm_e = cm_lane; cm_e < 64u; cm_e = cm_e + {sg}u) {{
        let cm_r = cm_e / 4u;
        let cm_c = cm_e % 4u * 4u;
        let cm_m = cm_m0 + cm_sm + {fm}u + cm_r;
        let cm_n = cm_n0 + cm_sn + {fn_}u + cm_c;
        let cm_v = cm_o + cm_r * 16u + cm_c;
        if (cm_m < {m_dim}) {{
            if (cm_n + 3u < {n_dim}) {{
                c_store4({bc}cm_m, cm_n, {});
            }} else {{
                for (var cm_t = 0u; cm_t < 4u; cm_t = cm_t + 1u) {{
                    if (cm_n + cm_t < {n_dim}) {{
                        c_store({bc}cm_m, cm_n + cm_t, {});
                    }}
                }}
            }}
        }}
    }}",
                        d_four(
                            "vec4<f32>(f32(cm_out[cm_v]), f32(cm_out[cm_v + 1u]), f32(cm_out[cm_v + 2u]), f32(cm_out[cm_v + 3u]))"
                        ),
                        d_one("f32(cm_out[cm_v + cm_t])", "cm_n + cm_t")
                    );
                }
            }
        }
    }
    if extra.is_empty() {
        s
    } else {
        s.lines().map(|l| format!("{extra}{l}\n")).collect()
    }
}

/// The epilogue of a block that lies inside C when C takes fragments straight
/// ([`Direct`]): opens `if (cm_whole) {` (a condition uniform over the workgroup, as the
/// stores require) and stores every fragment straight into C ([`straight_stores`]); the
/// caller closes the branch.
fn direct_epilogue(spec: &CoopSpec, direct: Direct) -> String {
    let c = spec.config;
    let bc = batch_coords(spec.batch_axes);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "    // Blocks inside C store each fragment straight into it; edge blocks go through the
    // subgroup's scratch.
    let cm_whole = cm_m0 + {}u <= cm_m_len && cm_n0 + {}u <= cm_n_len;
    if (cm_whole) {{",
        c.block_m, c.block_n
    );
    s += &straight_stores(spec, direct, "c", &bc, "        ");
    s
}

/// The epilogue of split-k's partial kernel: every block lies inside the workspace (padded to
/// whole blocks), so every fragment goes straight into its part's partial sums.
fn partial_epilogue(spec: &CoopSpec) -> String {
    let mut s = String::from(
        "    // The workspace is padded to whole blocks: every fragment goes straight into it.\n",
    );
    s += &straight_stores(
        spec,
        Direct::Rows,
        "partial",
        "cm_product, cm_split, ",
        "    ",
    );
    s
}

/// Stores every fragment with `coopStoreT`/`coopStore` on `<role>_data` at its origin's
/// offset (coordinates `coords` then row and column), the stride read from the operand's
/// index function (the offset of the next row or column minus the origin's); every line
/// indented by `ind`.
fn straight_stores(spec: &CoopSpec, direct: Direct, role: &str, coords: &str, ind: &str) -> String {
    let c = spec.config;
    let mut s = String::new();
    let (next_m, next_n, store) = match direct {
        Direct::Rows => (" + 1u", "", "coopStoreT"),
        Direct::Cols => ("", " + 1u", "coopStore"),
    };
    let _ = writeln!(
        s,
        "{ind}let cm_c0 = {role}_at({coords}cm_m0 + cm_sm, cm_n0 + cm_sn);
{ind}let cm_ld = {role}_at({coords}cm_m0 + cm_sm{next_m}, cm_n0 + cm_sn{next_n}) - cm_c0;"
    );
    for i in 0..c.frags_m {
        for j in 0..c.frags_n {
            let (along_m, along_n) = (16 * i, 16 * j);
            let offset = match direct {
                Direct::Rows => format!("{along_m}u * cm_ld + {along_n}u"),
                Direct::Cols => format!("{along_m}u + {along_n}u * cm_ld"),
            };
            let _ = writeln!(
                s,
                "{ind}let cm_c{i}_{j} = cm_c0 + {offset};
{ind}{store}(cm_acc{i}_{j}, &{role}_data[cm_c{i}_{j}], cm_ld);"
            );
        }
    }
    s
}
