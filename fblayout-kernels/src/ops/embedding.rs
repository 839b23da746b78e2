//! Embedding lookup and its gradient, a deterministic scatter-add.
//!
//! For token ids `ids` (`u32`, `[tokens]`) and a table `[vocab, hidden]`:
//!
//! - forward: `out[t, :] = table[ids[t], :]`;
//! - backward: `dtable[v, :] = Σ_{t : ids[t] = v} dout[t, :]` for every vocabulary row `v`
//!   (0 for the ids no token uses), or added to what `dtable` holds when accumulating
//!   gradients over several batches.
//!
//! An id at or past `vocab` is an error. Ids come from the host, so [`TokenIds::new`] checks
//! them there ([`OpError::OutOfRange`]); the forward also takes ids produced on the GPU
//! ([`EmbeddingOp::ids_view`]), and then writes NaN for a token whose id is out of range rather
//! than read outside the table.
//!
//! # Determinism
//! WGSL has no float atomics, and atomics would make the sum's order (so its rounding) vary
//! from run to run. [`TokenIds::new`] instead builds on the host, once per batch of ids, an
//! index of the tokens of each id (compressed sparse rows: the ids in use in increasing order,
//! where each one's tokens start, and the token positions grouped by id, each group in
//! increasing order), uploaded with the ids. The backward gives each element of each table row
//! one invocation, which sums its row's tokens in that order: the same bits on every run.
//!
//! Both kernels move four elements of a row per invocation where the views have wide accesses
//! along `hidden`.

use fblayout_core::kernel::{KernelModule, KernelSource, Operand};
use fblayout_core::layout::{ElemType, LayoutSpec, View};
use rayon::prelude::*;

use super::compiled::{Compiled, workgroups_for};
use super::error::OpError;
use super::softmax::{NAN, Quads, Role, check_float, wide_of};
use crate::cpu::{Logical, LogicalMut, Real};
use crate::entry_point::LinearEntry;
use crate::runtime::{Batch, Gpu, GpuBuffer, granular};
use crate::tensor::GpuArg;

const FORWARD: &str = "embedding forward";
const BACKWARD: &str = "embedding backward";
const FORWARD_ENTRY: &str = "embedding_forward";
const BACKWARD_ENTRY: &str = "embedding_backward";
const ACCUMULATE: &str = "embedding backward, accumulating";
const ACCUMULATE_ENTRY: &str = "embedding_accumulate";
/// The slot of a vocabulary row that no token uses.
const UNUSED: u32 = u32::MAX;

/// The views of the ids and of their index, all dense `u32` vectors.
#[derive(Debug, Clone, PartialEq)]
struct IndexViews {
    /// `[tokens]`: the id of each token.
    ids: View,
    /// `[vocab]`: for each vocabulary row, its place among the ids in use, or `UNUSED`.
    slot: View,
    /// `[used]`: the ids in use, in increasing order.
    rows: View,
    /// `[used + 1]`: where the tokens of each id in use start in `positions`.
    starts: View,
    /// `[tokens]`: the tokens, grouped by id.
    positions: View,
}

impl IndexViews {
    fn new() -> Self {
        let vector = |name: &str, axis: &str| {
            LayoutSpec::new(name)
                .dyn_axis(axis)
                .elem(ElemType::U32)
                .build()
                .expect("a u32 vector of run-time length is a layout")
                .view()
        };
        Self {
            ids: vector("ids", "tokens"),
            slot: vector("slot", "vocab"),
            rows: vector("rows", "used"),
            starts: vector("starts", "used"),
            positions: vector("positions", "tokens"),
        }
    }
}

/// A batch of token ids, checked against the vocabulary and uploaded with the index the
/// backward sums by (see the module docs).
#[derive(Debug)]
pub struct TokenIds {
    vocab: u32,
    tokens: u32,
    used: u32,
    views: IndexViews,
    ids: GpuBuffer,
    slot: GpuBuffer,
    rows: GpuBuffer,
    starts: GpuBuffer,
    positions: GpuBuffer,
    /// The host's `[vocab]` slots, all `UNUSED`, kept for the next refill's index.
    spare: Vec<u32>,
}

impl TokenIds {
    /// Checks that every id is below `vocab`, builds the index and uploads both.
    pub fn new(gpu: &Gpu, ids: &[u32], vocab: u32) -> Result<Self, OpError> {
        let index = TokenIndex::new(ids, vocab)?;
        let tokens = ids.len() as u32;
        let [ids_len, slot, rows, starts, positions] = Self::lengths(tokens, vocab);
        let mut uploaded = Self {
            vocab,
            tokens,
            used: 0,
            views: IndexViews::new(),
            ids: GpuBuffer::scratch::<u32>(gpu, ids_len)?,
            slot: GpuBuffer::scratch::<u32>(gpu, slot)?,
            rows: GpuBuffer::scratch::<u32>(gpu, rows)?,
            starts: GpuBuffer::scratch::<u32>(gpu, starts)?,
            positions: GpuBuffer::scratch::<u32>(gpu, positions)?,
            spare: Vec::new(),
        };
        uploaded.upload(&index, ids)?;
        uploaded.spare = index.into_slot();
        Ok(uploaded)
    }

    /// The `u32`s of the buffers of `tokens` ids of a vocabulary of `vocab`: the ids, each
    /// row's slot, the rows in use, where their tokens start, and the tokens grouped by row.
    /// The index has room for as many distinct ids as there can be, so that
    /// [`refill`](Self::refill) never reallocates.
    fn lengths(tokens: u32, vocab: u32) -> [usize; 5] {
        let most = tokens.min(vocab) as usize;
        [
            tokens as usize,
            vocab as usize,
            most,
            most + 1,
            tokens as usize,
        ]
    }

    /// The bytes [`new`](Self::new) takes from the device's pool for `tokens` ids of a
    /// vocabulary of `vocab` (held until the ids are dropped).
    pub fn bytes(tokens: u32, vocab: u32) -> u64 {
        Self::lengths(tokens, vocab)
            .iter()
            .map(|&n| granular(n as u64 * 4))
            .sum()
    }

    /// Replaces the ids with `ids` (as many as before, each below the same vocabulary) in the
    /// same buffers, so that work recorded once over them reads the new batch.
    pub fn refill(&mut self, ids: &[u32]) -> Result<(), OpError> {
        if ids.len() != self.tokens as usize {
            return Err(OpError::shape(
                FORWARD,
                format!(
                    "{} token ids refill buffers of {}: a refill keeps the count",
                    ids.len(),
                    self.tokens
                ),
            ));
        }
        let index = TokenIndex::build(ids, self.vocab, std::mem::take(&mut self.spare))?;
        self.upload(&index, ids)?;
        self.spare = index.into_slot();
        Ok(())
    }

    /// Writes `ids` and their `index` into the buffers (the index's vectors padded with zeros
    /// to their buffers' capacity).
    fn upload(&mut self, index: &TokenIndex, ids: &[u32]) -> Result<(), OpError> {
        let padded = |v: &[u32], buffer: &GpuBuffer| {
            let mut v = v.to_vec();
            v.resize(buffer.len_bytes() as usize / 4, 0);
            v
        };
        self.ids.write(ids)?;
        self.slot.write(&index.slot)?;
        self.rows.write(&padded(&index.rows, &self.rows))?;
        self.starts.write(&padded(&index.starts, &self.starts))?;
        self.positions.write(&index.positions)?;
        self.used = index.starts.len() as u32 - 1;
        Ok(())
    }

    /// The number of tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The vocabulary size the ids were checked against.
    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// The number of distinct ids.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// The ids as a kernel argument, through [`EmbeddingOp::ids_view`].
    pub fn ids(&self) -> Result<GpuArg<'_>, OpError> {
        Ok(GpuArg::new(
            &self.ids,
            &self.views.ids,
            &[("tokens", self.tokens)],
        )?)
    }

    /// The index as kernel arguments: slot, rows, starts, positions. Where `in_use`, `rows`
    /// and `starts` are as long as this batch's ids in use (a kernel walking the rows in use);
    /// else as long as their buffers, the same for every batch, so that work recorded once
    /// stays right for every refill (a kernel that finds a row's tokens through `slot`, which
    /// never points past the rows in use).
    fn index_args(&self, in_use: bool) -> Result<[GpuArg<'_>; 4], OpError> {
        let rows = if in_use {
            self.used
        } else {
            Self::lengths(self.tokens, self.vocab)[2] as u32
        };
        Ok([
            GpuArg::new(&self.slot, &self.views.slot, &[("vocab", self.vocab)])?,
            GpuArg::new(&self.rows, &self.views.rows, &[("used", rows)])?,
            GpuArg::new(&self.starts, &self.views.starts, &[("used", rows + 1)])?,
            GpuArg::new(
                &self.positions,
                &self.views.positions,
                &[("tokens", self.tokens)],
            )?,
        ])
    }
}

/// The index of the tokens of each id (see the module docs), on the host.
struct TokenIndex {
    slot: Vec<u32>,
    rows: Vec<u32>,
    starts: Vec<u32>,
    positions: Vec<u32>,
}

impl TokenIndex {
    fn new(ids: &[u32], vocab: u32) -> Result<Self, OpError> {
        Self::build(ids, vocab, Vec::new())
    }

    /// The index of `ids`, its slots written into `slot` where that is a `[vocab]` vector of
    /// `UNUSED` (one [`into_slot`](Self::into_slot) gave back), else into a new one. Its cost
    /// is in the tokens and the ids in use, and a bit of the vocabulary's each.
    fn build(ids: &[u32], vocab: u32, mut slot: Vec<u32>) -> Result<Self, OpError> {
        if ids.is_empty() || u32::try_from(ids.len()).is_err() || vocab == 0 {
            return Err(OpError::shape(
                FORWARD,
                format!(
                    "{} tokens of a vocabulary of {vocab}: both must be 1 to 2^32 − 1",
                    ids.len()
                ),
            ));
        }
        check_ids(ids, vocab)?;
        if slot.len() != vocab as usize {
            slot = vec![UNUSED; vocab as usize];
        }
        // The ids in use, in increasing order (the set bits of a bitset of the vocabulary,
        // read word by word), each given its place among them.
        let mut in_use = vec![0u64; (vocab as usize).div_ceil(64)];
        for &id in ids {
            in_use[id as usize / 64] |= 1 << (id % 64);
        }
        let mut rows = Vec::new();
        for (w, &word) in in_use.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                rows.push(w as u32 * 64 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        for (s, &v) in rows.iter().enumerate() {
            slot[v as usize] = s as u32;
        }
        let mut starts = vec![0u32; rows.len() + 1];
        for &id in ids {
            starts[slot[id as usize] as usize + 1] += 1;
        }
        for s in 1..starts.len() {
            starts[s] += starts[s - 1];
        }
        // Counting sort by id, stable: each id's tokens stay in increasing order.
        let mut next: Vec<u32> = starts[..starts.len() - 1].to_vec();
        let mut positions = vec![0u32; ids.len()];
        for (t, &id) in ids.iter().enumerate() {
            let s = slot[id as usize] as usize;
            positions[next[s] as usize] = t as u32;
            next[s] += 1;
        }
        Ok(Self {
            slot,
            rows,
            starts,
            positions,
        })
    }

    /// The slots set back to `UNUSED` (only the rows in use are touched), for the next
    /// [`build`](Self::build).
    fn into_slot(self) -> Vec<u32> {
        let mut slot = self.slot;
        for &v in &self.rows {
            slot[v as usize] = UNUSED;
        }
        slot
    }
}

/// Checks that every id is below `vocab`.
fn check_ids(ids: &[u32], vocab: u32) -> Result<(), OpError> {
    match ids.iter().position(|&id| id >= vocab) {
        Some(position) => Err(OpError::OutOfRange {
            op: FORWARD,
            role: "ids",
            position,
            value: u64::from(ids[position]),
            limit: u64::from(vocab),
        }),
        None => Ok(()),
    }
}

/// The embedding kernels, built for the views of the table and of the output.
#[derive(Debug, Clone)]
pub struct EmbeddingOp {
    views: IndexViews,
    forward: Compiled,
    backward: Compiled,
    accumulate: Compiled,
    wide: bool,
}

impl EmbeddingOp {
    /// The kernels reading `table` (`[vocab, hidden]`) and writing `out` (`[tokens, hidden]`);
    /// the backward reads `dout` through `out`'s view and writes `dtable` through `table`'s.
    pub fn new(gpu: &Gpu, table: &View, out: &View) -> Result<Self, OpError> {
        let rank = table.axes().len();
        if rank != 2 || out.axes().len() != 2 {
            return Err(OpError::shape(
                FORWARD,
                format!(
                    "the table and the output are [rows, hidden]; they have ranks {rank} and {}",
                    out.axes().len()
                ),
            ));
        }
        check_float(FORWARD, "table", table)?;
        check_float(FORWARD, "out", out)?;
        let hidden = |v: &View| v.axes()[1].extent.as_static();
        if let (Some(a), Some(b)) = (hidden(table), hidden(out)) {
            if a != b {
                return Err(OpError::shape(
                    FORWARD,
                    format!("the table's rows have {a} elements, the output's {b}"),
                ));
            }
        }
        let views = IndexViews::new();
        let (fw, forward) = build_forward(gpu, &views, table, out)?;
        let (bw, backward) = build_backward(gpu, &views, table, out, false)?;
        let (_, accumulate) = build_backward(gpu, &views, table, out, true)?;
        Ok(Self {
            views,
            forward,
            backward,
            accumulate,
            wide: fw && bw,
        })
    }

    /// The view GPU-made ids must be read through: a dense `u32 [tokens]`, `tokens` a run-time
    /// extent.
    pub fn ids_view(&self) -> &View {
        &self.views.ids
    }

    /// Whether both kernels move four elements per invocation.
    pub fn is_vectorized(&self) -> bool {
        self.wide
    }

    /// The shaders of the forward, the backward and the accumulating backward.
    pub fn modules(&self) -> Vec<KernelModule> {
        [&self.forward, &self.backward, &self.accumulate]
            .iter()
            .map(|k| k.module().clone())
            .collect()
    }

    /// Records `out[t, :] = table[ids[t], :]`; `ids` is read through
    /// [`ids_view`](Self::ids_view) (from [`TokenIds::ids`], or made on the GPU).
    pub fn forward(
        &self,
        batch: &mut Batch<'_>,
        ids: &GpuArg<'_>,
        table: &GpuArg<'_>,
        out: &GpuArg<'_>,
    ) -> Result<(), OpError> {
        let (t, tab, o) = (ids.dims(), table.dims(), out.dims());
        if t.len() != 1 || tab.len() != 2 || o.len() != 2 || o[0] != t[0] || o[1] != tab[1] {
            return Err(OpError::shape(
                FORWARD,
                format!("ids {t:?}, table {tab:?} and out {o:?} don't fit together"),
            ));
        }
        self.forward.record_linear(
            batch,
            FORWARD_ENTRY,
            &[("ids", ids), ("table", table), ("out", out)],
            &[],
            workgroups_for(FORWARD, units(o[0], o[1]))?,
        )
    }

    /// Records `dtable[v, :] (+)= Σ_{t : ids[t] = v} dout[t, :]`: overwriting every row of
    /// `dtable` (zeros where no token has the id) or, when `accumulate`, adding to the rows the
    /// ids use and leaving the others as they are.
    ///
    /// Without `accumulate` the recorded work reads whatever ids [`TokenIds::refill`] last put
    /// in the buffers, so it may be recorded once for every batch; with it, its grid is the
    /// number of ids in use, so it must be recorded again after each refill.
    pub fn backward(
        &self,
        batch: &mut Batch<'_>,
        ids: &TokenIds,
        dout: &GpuArg<'_>,
        dtable: &GpuArg<'_>,
        accumulate: bool,
    ) -> Result<(), OpError> {
        let (d, tab) = (dout.dims(), dtable.dims());
        let fits = d.len() == 2 && tab.len() == 2 && d[1] == tab[1];
        if !fits || d[0] != ids.tokens as usize || tab[0] != ids.vocab as usize {
            return Err(OpError::shape(
                BACKWARD,
                format!(
                    "{} ids of a vocabulary of {}, dout {d:?} and dtable {tab:?} don't fit \
                     together",
                    ids.tokens, ids.vocab
                ),
            ));
        }
        let [slot, rows, starts, positions] = ids.index_args(accumulate)?;
        let index = [("starts", &starts), ("positions", &positions)];
        let (kernel, entry, walk, walked) = if accumulate {
            (
                &self.accumulate,
                ACCUMULATE_ENTRY,
                ("rows", &rows),
                ids.used as usize,
            )
        } else {
            (&self.backward, BACKWARD_ENTRY, ("slot", &slot), tab[0])
        };
        kernel.record_linear(
            batch,
            entry,
            &[walk, index[0], index[1], ("dout", dout), ("dtable", dtable)],
            &[],
            workgroups_for(BACKWARD, units(walked, tab[1]))?,
        )
    }
}

/// Invocations over `rows × hidden` elements, four of a row each.
fn units(rows: usize, hidden: usize) -> u64 {
    rows as u64 * (hidden as u64).div_ceil(4)
}

/// The quad helpers of the embedding kernels (one leading coordinate: the row).
fn quads(wide: bool) -> Quads<'static> {
    Quads {
        prefix: "emb",
        lead: 1,
        wide,
        step: 1,
    }
}

/// The opening of an entry point over `rows × ⌈hidden/4⌉` invocations: row `emb_c0`, first
/// element `emb_j` of its quad, row length `emb_n`.
fn open(name: &str, rows: &str, hidden: &str) -> String {
    let entry = LinearEntry {
        name,
        prefix: "emb",
    };
    let units = [rows.to_owned(), format!("(({hidden} + 3u) / 4u)")];
    format!(
        "{}{}    let emb_j = {} * 4u;\n    let emb_n = {hidden};\n",
        entry.open(&units.join(" * ")),
        entry.decode(&units),
        entry.coord(1),
    )
}

fn build_forward(
    gpu: &Gpu,
    views: &IndexViews,
    table: &View,
    out: &View,
) -> Result<(bool, Compiled), OpError> {
    let (wide, operands) = wide_of(
        &[("table", Role::Read), ("out", Role::Write)],
        &[table, out],
    )?;
    let q = quads(wide);
    let body = format!(
        "{NAN}{helpers}{open}    let emb_id = ids_load(emb_c0);
    let emb_ok = emb_id < table_dim0();
    // A bad id reads row 0 and writes NaN: never a read outside the table.
    let emb_row = {get};
    {put};
}}
",
        helpers = q.wgsl(&["table"], &["out"]),
        open = open(FORWARD_ENTRY, "out_dim0()", "out_dim1()"),
        get = q.get("table", "select(0u, emb_id, emb_ok)", "emb_j", "emb_n"),
        put = q.put(
            "out",
            "emb_c0",
            "emb_j",
            "emb_n",
            "select(vec4<f32>(fbl_nan()), emb_row, emb_ok)"
        ),
    );
    let mut source = KernelSource::new(FORWARD).operand(Operand::read("ids", &views.ids)?);
    for o in operands {
        source = source.operand(o);
    }
    Ok((wide, Compiled::new(FORWARD, gpu, source.body(body))?))
}

/// The backward: overwriting, one invocation per quad of every table row (zeros for the rows
/// no token uses); or accumulating, one per quad of the rows in use only.
fn build_backward(
    gpu: &Gpu,
    views: &IndexViews,
    table: &View,
    out: &View,
    accumulate: bool,
) -> Result<(bool, Compiled), OpError> {
    let (wide, operands) = wide_of(
        &[("dout", Role::Read), ("dtable", Role::Write)],
        &[out, table],
    )?;
    let q = quads(wide);
    let (op, walk, row) = if accumulate {
        (ACCUMULATE, Operand::read("rows", &views.rows)?, "emb_row")
    } else {
        (BACKWARD, Operand::read("slot", &views.slot)?, "emb_c0")
    };
    // Which row the invocation sums, and its place `emb_s` in the index.
    let (entry, rows, find) = if accumulate {
        (
            ACCUMULATE_ENTRY,
            "rows_dim0()",
            format!(
                "    let emb_s = emb_c0;
    let emb_row = rows_load(emb_s);
    var emb_acc = {};
",
                q.get("dtable", row, "emb_j", "emb_n")
            ),
        )
    } else {
        (
            BACKWARD_ENTRY,
            "dtable_dim0()",
            "    let emb_s = slot_load(emb_c0);
    var emb_acc = vec4<f32>(0.0);
"
            .to_owned(),
        )
    };
    let body = format!(
        "{helpers}{open}{find}    if (emb_s < starts_dim0() - 1u) {{
        let emb_end = starts_load(emb_s + 1u);
        for (var emb_p = starts_load(emb_s); emb_p < emb_end; emb_p = emb_p + 1u) {{
            let emb_t = positions_load(emb_p);
            if (emb_t < dout_dim0()) {{
                emb_acc = emb_acc + {grad};
            }}
        }}
    }}
    {put};
}}
",
        helpers = q.wgsl(&["dout", "dtable"], &["dtable"]),
        open = open(entry, rows, "dtable_dim1()"),
        grad = q.get("dout", "emb_t", "emb_j", "emb_n"),
        put = q.put("dtable", row, "emb_j", "emb_n", "emb_acc"),
    );
    let mut source = KernelSource::new(op).operand(walk);
    for o in [
        Operand::read("starts", &views.starts)?,
        Operand::read("positions", &views.positions)?,
    ]
    .into_iter()
    .chain(operands)
    {
        source = source.operand(o);
    }
    Ok((wide, Compiled::new(op, gpu, source.body(body))?))
}

/// Checks the shapes of the CPU kernels' operands.
fn check_cpu(
    op: &'static str,
    tokens: usize,
    rows: &[usize],
    table: &[usize],
) -> Result<(), OpError> {
    if rows.len() != 2 || table.len() != 2 || rows[0] != tokens || rows[1] != table[1] {
        return Err(OpError::shape(
            op,
            format!("{tokens} ids, rows {rows:?} and table {table:?} don't fit together"),
        ));
    }
    Ok(())
}

/// The lookup on the CPU: `out[t, :] = table[ids[t], :]`.
pub fn embedding_forward_cpu<T: Real>(
    ids: &[u32],
    table: &dyn Logical<T>,
    out: &mut dyn LogicalMut<T>,
) -> Result<(), OpError> {
    let (dims, tab) = (out.dims().to_vec(), table.dims().to_vec());
    check_cpu(FORWARD, ids.len(), &dims, &tab)?;
    check_ids(ids, tab[0] as u32)?;
    let hidden = dims[1];
    let dense: Vec<T> = (0..ids.len() * hidden)
        .into_par_iter()
        .map(|i| table.get(&[ids[i / hidden] as usize, i % hidden]))
        .collect();
    out.scatter(&dense);
    Ok(())
}

/// The gradient on the CPU, in `f64`: `dtable[v, :] (+)= Σ_{t : ids[t] = v} dout[t, :]`, in
/// token order, with `accumulate` as for [`EmbeddingOp::backward`].
pub fn embedding_backward_cpu<T: Real>(
    ids: &[u32],
    dout: &dyn Logical<T>,
    dtable: &mut dyn LogicalMut<T>,
    accumulate: bool,
) -> Result<(), OpError> {
    let (dims, tab) = (dout.dims().to_vec(), dtable.dims().to_vec());
    check_cpu(BACKWARD, ids.len(), &dims, &tab)?;
    check_ids(ids, tab[0] as u32)?;
    let hidden = tab[1];
    let index = TokenIndex::new(ids, tab[0] as u32)?;
    let old: &dyn LogicalMut<T> = dtable;
    let dense: Vec<T> = (0..tab[0] * hidden)
        .into_par_iter()
        .map(|i| {
            let (v, h) = (i / hidden, i % hidden);
            let tokens = match index.slot[v] {
                UNUSED => &[][..],
                s => {
                    &index.positions
                        [index.starts[s as usize] as usize..index.starts[s as usize + 1] as usize]
                }
            };
            let sum: f64 = tokens
                .iter()
                .map(|&t| dout.get(&[t as usize, h]).to_f64())
                .sum();
            match (accumulate, tokens.is_empty()) {
                (true, true) => old.get(&[v, h]),
                (true, false) => T::from_f64(old.get(&[v, h]).to_f64() + sum),
                (false, _) => T::from_f64(sum),
            }
        })
        .collect();
    dtable.scatter(&dense);
    Ok(())
}
