//! Batched submission: many dispatches, one command buffer, one submit.
//!
//! A [`Batch`] records dispatches of [`KernelModule`]s (with their operands bound by role and
//! their parameter blocks), buffer copies and clears, and sends them all to the GPU with one
//! [`Batch::submit`]. Nothing waits: results are read back only when asked
//! ([`GpuBuffer::read_back`]), and the queue keeps the recorded order. Every parameter block of a
//! batch lives in one uniform buffer, at offsets aligned as the device requires, so a batch of a
//! hundred dispatches allocates one buffer (from the pool) rather than a hundred. The pipelines
//! a batch's dispatches need and the device has not compiled yet are compiled when the batch is
//! finished, all at once on the host's cores: a driver compiles a pipeline on the calling
//! thread, and the first recording of a whole training step needs dozens.
//!
//! [`Batch::submit_timed`] runs the batch and says how long each dispatch took: from GPU
//! timestamps where the device has `TIMESTAMP_QUERY`, else from the wall clock around one
//! submission per dispatch.
//!
//! [`Batch::finish`] makes a [`Recording`]: the batch with its bind groups built, to submit
//! again and again without recording it again (a training step), with the parts that change
//! between submissions re-recorded and put in place by [`Recording::replace`], and its commands
//! encoded ahead of time ([`Recording::encode`]) while the GPU is busy.
//!
//! ```no_run
//! # fn demo(gpu: &fblayout_kernels::runtime::Gpu, kernel: &fblayout_core::kernel::KernelModule,
//! #         x: &fblayout_kernels::runtime::GpuBuffer, y: &fblayout_kernels::runtime::GpuBuffer)
//! #         -> Result<(), fblayout_kernels::runtime::GpuError> {
//! use fblayout_core::kernel::ParamValue;
//!
//! let mut batch = gpu.batch();
//! for _ in 0..10 {
//!     batch.dispatch(kernel, "main", &[("x", x), ("y", y)], &[("x.tokens_len", ParamValue::U32(100))], [4, 1, 1])?;
//! }
//! batch.submit()?; // one submit for ten dispatches
//! # Ok(()) }
//! ```

use std::num::NonZeroU64;
use std::ops::Range;
use std::time::Instant;

use fblayout_core::kernel::{Access, KernelModule, ParamValue};

use super::buffer::{BufferKind, GpuBuffer, checked_bytes, map_read};
use super::dispatch::{OwnedShader, Shader, check_compute_entry, linear_grid};
use super::error::GpuError;
use super::gpu::{Gpu, scoped};
use super::scratch::{Lending, Scratch, Workspace};

/// How long one dispatch of a timed batch took.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// `kernel:entry`.
    pub label: String,
    /// The section the dispatch was recorded in ([`Batch::section`]), if any.
    pub section: Option<String>,
    /// Nanoseconds.
    pub nanos: f64,
    /// Whether the time comes from GPU timestamps (else from the wall clock).
    pub gpu_timestamps: bool,
}

enum Item {
    Dispatch(Dispatch),
    Copy {
        src: GpuBuffer,
        dst: GpuBuffer,
        bytes: u64,
    },
    Clear(GpuBuffer),
}

/// A recorded dispatch; `P` is its pipeline, or in a [`Batch`] the index of the pipeline to
/// compile when the batch is finished.
struct Dispatch<P = wgpu::ComputePipeline> {
    label: String,
    section: Option<String>,
    pipeline: P,
    buffers: Vec<(u32, GpuBuffer)>,
    params: Option<(u32, Vec<u8>)>,
    grid: [u32; 3],
}

impl<P> Dispatch<P> {
    fn with_pipeline<Q>(self, pipeline: Q) -> Dispatch<Q> {
        Dispatch {
            label: self.label,
            section: self.section,
            pipeline,
            buffers: self.buffers,
            params: self.params,
            grid: self.grid,
        }
    }
}

/// What a [`Batch`] holds: an item ready to run, or a dispatch whose pipeline was not
/// compiled when it was recorded. The batch's new pipelines are compiled together, on the
/// host's cores, when it is finished: a first recording of a whole training step would
/// otherwise wait for one driver compilation after another.
enum Recorded {
    Ready(Item),
    Uncompiled(Dispatch<usize>),
}

/// Work recorded for one submission (see the module docs).
pub struct Batch<'g> {
    gpu: &'g Gpu,
    items: Vec<Recorded>,
    /// The pipelines the batch's uncompiled dispatches wait for (shader, entry point), once
    /// each.
    uncompiled: Vec<(OwnedShader, String)>,
    section: Option<String>,
    /// The workspace scratch comes from, if any, and what of it is taken.
    lending: Option<Lending>,
    /// The scratch taken since the last release.
    taken: Scratch,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// An empty batch on this device.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            gpu: self,
            items: Vec::new(),
            uncompiled: Vec::new(),
            section: None,
            lending: None,
            taken: Scratch::none(),
        }
    }
}

impl<'g> Batch<'g> {
    /// The device the batch runs on.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Tags the dispatches recorded from now on with `name` (a step of a model, say), so that
    /// [`submit_timed`](Self::submit_timed) can say where the time went.
    pub fn section(&mut self, name: impl Into<String>) {
        self.section = Some(name.into());
    }

    /// The number of recorded items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Takes the scratch of the work recorded from now on from `workspace` rather than from
    /// the device's pool (see [`Scratch`]): each piece of work, up to
    /// [`release_scratch`](Self::release_scratch), borrows some of its buffers.
    pub fn use_workspace(&mut self, workspace: &Workspace) {
        self.lending = Some(Lending::new(workspace));
    }

    /// A scratch buffer of `len` elements of `T`, its contents unspecified, for the work being
    /// recorded (a kernel's room beyond its operands, see [`Scratch`]): the smallest free
    /// buffer of the batch's workspace that is large enough (an error where none is), or,
    /// without a workspace, a buffer from the device's pool.
    pub fn scratch<T: bytemuck::Pod>(&mut self, len: usize) -> Result<GpuBuffer, GpuError> {
        let buffer = match &mut self.lending {
            Some(lending) => {
                let bytes = checked_bytes::<T>(len).ok_or_else(|| {
                    GpuError::bad_input("Batch::scratch", format!("{len} elements overflow"))
                })?;
                lending.take(bytes)?
            }
            None => GpuBuffer::scratch::<T>(self.gpu, len)?,
        };
        self.taken = std::mem::take(&mut self.taken).and(Scratch::buffer(buffer.len_bytes()));
        Ok(buffer)
    }

    /// Ends a piece of work: the work recorded after it (which runs after it on the GPU) may
    /// take the workspace's buffers it took. Returns the scratch it took since the last
    /// release, with or without a workspace.
    pub fn release_scratch(&mut self) -> Scratch {
        if let Some(lending) = &mut self.lending {
            lending.release();
        }
        std::mem::take(&mut self.taken)
    }

    /// Records `entry` of `kernel` over `grid` workgroups, with each operand's buffer given by
    /// role and every field of its parameter block given by name (see
    /// [`ParamsLayout::pack`](fblayout_core::kernel::ParamsLayout::pack)).
    ///
    /// Every operand must be bound exactly once, to a storage buffer; the grid must fit the
    /// device's limit per dimension. A pipeline not compiled yet is compiled when the batch is
    /// finished ([`finish`](Self::finish), [`submit`](Self::submit), or
    /// [`Recording::replace`]), together with the batch's other new pipelines.
    pub fn dispatch(
        &mut self,
        kernel: &KernelModule,
        entry: &str,
        buffers: &[(&str, &GpuBuffer)],
        params: &[(&str, ParamValue)],
        grid: [u32; 3],
    ) -> Result<(), GpuError> {
        let what = || format!("the dispatch of `{entry}` in kernel `{}`", kernel.name());
        let module = kernel.module();
        check_compute_entry(module, entry)?;
        let max = self.gpu.max_workgroups_per_dimension();
        if grid.iter().any(|&n| n > max) {
            return Err(GpuError::bad_input(
                what(),
                format!("the grid {grid:?} has more than {max} workgroups in a dimension"),
            ));
        }
        for (i, (role, _)) in buffers.iter().enumerate() {
            if buffers[..i].iter().any(|(r, _)| r == role) {
                return Err(GpuError::bad_input(
                    what(),
                    format!("operand `{role}` is bound twice"),
                ));
            }
        }
        let mut bound = Vec::with_capacity(kernel.slots().len());
        for slot in kernel.slots() {
            let Some((_, buffer)) = buffers.iter().find(|(r, _)| *r == slot.role) else {
                return Err(GpuError::bad_input(
                    what(),
                    format!("operand `{}` is not bound", slot.role),
                ));
            };
            if buffer.kind() != BufferKind::Storage {
                return Err(GpuError::bad_input(
                    what(),
                    format!("operand `{}` needs a storage buffer", slot.role),
                ));
            }
            bound.push((slot.binding, (*buffer).clone()));
        }
        if let Some((role, _)) = buffers.iter().find(|(r, _)| kernel.slot(r).is_none()) {
            let roles: Vec<&str> = kernel.slots().iter().map(|s| s.role.as_str()).collect();
            return Err(GpuError::bad_input(
                what(),
                format!(
                    "the kernel has no operand `{role}` (it has: {})",
                    roles.join(", ")
                ),
            ));
        }
        for (i, (binding, a)) in bound.iter().enumerate() {
            let writes = |b: u32| {
                kernel
                    .slots()
                    .iter()
                    .any(|s| s.binding == b && s.access == Access::ReadWrite)
            };
            if let Some((other, _)) = bound[..i]
                .iter()
                .find(|(b, buf)| buf.same_memory(a) && (writes(*b) || writes(*binding)))
            {
                let name = |b: u32| {
                    kernel
                        .slots()
                        .iter()
                        .find(|s| s.binding == b)
                        .map_or("?", |s| s.role.as_str())
                        .to_owned()
                };
                return Err(GpuError::bad_input(
                    what(),
                    format!(
                        "operands `{}` and `{}` are one buffer, and the kernel writes one of them",
                        name(*other),
                        name(*binding)
                    ),
                ));
            }
        }
        let params = match kernel.params() {
            Some(layout) => Some((layout.binding(), layout.pack(params)?)),
            None if params.is_empty() => None,
            None => {
                return Err(GpuError::bad_input(
                    what(),
                    "the kernel takes no parameters, but some were given",
                ));
            }
        };
        let dispatch = Dispatch {
            label: format!("{}:{entry}", kernel.name()),
            section: self.section.clone(),
            pipeline: (),
            buffers: bound,
            params,
            grid,
        };
        let shader = Shader::of(module);
        self.items
            .push(match self.gpu.cached_pipeline(shader, entry) {
                Some(pipeline) => Recorded::Ready(Item::Dispatch(dispatch.with_pipeline(pipeline))),
                None => {
                    let same =
                        |(s, e): &(OwnedShader, String)| s.shader().same(shader) && e == entry;
                    let at = match self.uncompiled.iter().position(same) {
                        Some(at) => at,
                        None => {
                            self.uncompiled
                                .push((OwnedShader::new(shader), entry.to_owned()));
                            self.uncompiled.len() - 1
                        }
                    };
                    Recorded::Uncompiled(dispatch.with_pipeline(at))
                }
            });
        Ok(())
    }

    /// The batch's items, every pipeline they wait for compiled (at once, on the host's
    /// cores).
    fn compiled_items(&mut self) -> Result<Vec<Item>, GpuError> {
        let items = std::mem::take(&mut self.items);
        let uncompiled = std::mem::take(&mut self.uncompiled);
        let entries: Vec<(Shader<'_>, &str)> = uncompiled
            .iter()
            .map(|(shader, entry)| (shader.shader(), entry.as_str()))
            .collect();
        let pipelines = self.gpu.compile_all(&entries)?;
        Ok(items
            .into_iter()
            .map(|item| match item {
                Recorded::Ready(item) => item,
                Recorded::Uncompiled(d) => {
                    let pipeline = pipelines[d.pipeline].clone();
                    Item::Dispatch(d.with_pipeline(pipeline))
                }
            })
            .collect())
    }

    /// Records `entry` over `workgroups` workgroups folded into a 2-D grid by [`linear_grid`],
    /// which says what index the entry point must compute. Returns the grid.
    pub fn dispatch_linear(
        &mut self,
        kernel: &KernelModule,
        entry: &str,
        buffers: &[(&str, &GpuBuffer)],
        params: &[(&str, ParamValue)],
        workgroups: u32,
    ) -> Result<[u32; 3], GpuError> {
        let max = self.gpu.max_workgroups_per_dimension();
        let grid = linear_grid(workgroups, max).ok_or_else(|| {
            GpuError::bad_input(
                format!("the dispatch of `{entry}` in kernel `{}`", kernel.name()),
                format!("{workgroups} workgroups do not fit a {max} × {max} grid"),
            )
        })?;
        self.dispatch(kernel, entry, buffers, params, grid)?;
        Ok(grid)
    }

    /// Records a copy of the first `bytes` bytes of `src` into `dst`.
    pub fn copy(&mut self, src: &GpuBuffer, dst: &GpuBuffer, bytes: u64) -> Result<(), GpuError> {
        if bytes > src.len_bytes() || bytes > dst.len_bytes() {
            return Err(GpuError::bad_input(
                "Batch::copy",
                format!(
                    "{bytes} bytes from a buffer of {} into one of {}",
                    src.len_bytes(),
                    dst.len_bytes()
                ),
            ));
        }
        if src.same_memory(dst) {
            return Err(GpuError::bad_input(
                "Batch::copy",
                "source and destination are one buffer",
            ));
        }
        self.items.push(Recorded::Ready(Item::Copy {
            src: src.clone(),
            dst: dst.clone(),
            bytes: bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT),
        }));
        Ok(())
    }

    /// Records zeroing the whole of `buffer`.
    pub fn clear(&mut self, buffer: &GpuBuffer) {
        self.items
            .push(Recorded::Ready(Item::Clear(buffer.clone())));
    }

    /// Sends everything recorded in one submission, without waiting for it.
    pub fn submit(self) -> Result<(), GpuError> {
        self.finish()?.submit()
    }

    /// Runs the batch, waits for it, and returns the time of each dispatch (copies and clears
    /// are not timed), with GPU timestamps where the device has them.
    pub fn submit_timed(self) -> Result<Vec<Timing>, GpuError> {
        self.finish()?.submit_timed()
    }

    /// Makes the batch ready to run, as many times as wanted: its parameter blocks uploaded and
    /// its bind groups built once (see [`Recording`]).
    pub fn finish(mut self) -> Result<Recording<'g>, GpuError> {
        let gpu = self.gpu;
        let items = self.compiled_items()?;
        let arena = Arena::new(gpu, &items)?;
        let groups = scoped(
            gpu.device(),
            || format!("the bind groups of {} dispatches", items.len()),
            || {
                items
                    .iter()
                    .enumerate()
                    .map(|(at, item)| match item {
                        Item::Dispatch(d) => Some(bind_group(gpu, d, arena.slot(at))),
                        _ => None,
                    })
                    .collect()
            },
        )?;
        Ok(Recording {
            gpu,
            items,
            groups,
            arena,
            dirty: false,
            generation: (
                RECORDINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                0,
            ),
        })
    }
}

/// A finished [`Batch`]: its items with their bind groups and parameter blocks, submitted as
/// often as wanted, each time in one submission, without recording anything again.
///
/// A training step records its dispatches once and submits this every step. What changes from
/// one step to the next (an optimiser's step number, a new batch of token ids) is recorded
/// again into a small batch and put in place with [`replace`](Self::replace): only the
/// replaced dispatches get new bind groups, and only where their buffers changed.
pub struct Recording<'g> {
    gpu: &'g Gpu,
    items: Vec<Item>,
    /// Each dispatch's bind group (`None` for copies and clears).
    groups: Vec<Option<wgpu::BindGroup>>,
    arena: Arena,
    /// Whether the host copy of the parameter blocks changed since the last upload.
    dirty: bool,
    /// This recording among all of the process's, and the replacements that changed what
    /// encoded commands hold (a bind group, a grid, a copy or a clear): commands encoded before
    /// one, or from another recording, are stale.
    generation: (u64, u64),
}

/// Numbers the recordings of the process, so that encoded commands know theirs.
static RECORDINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A [`Recording`]'s commands, encoded ahead of their submission
/// ([`Recording::encode`]): the host's part of encoding done while the GPU runs earlier work.
/// The parameter blocks are not in them but read when they run, so they stay current.
pub struct Encoded {
    commands: wgpu::CommandBuffer,
    generation: (u64, u64),
}

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoded")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl<'g> Recording<'g> {
    /// The number of recorded items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The bytes of the one uniform buffer that holds every dispatch's parameter block, as the
    /// pool allocated it (0 where no dispatch has one).
    pub fn params_bytes(&self) -> u64 {
        self.arena
            .buffer
            .as_ref()
            .map_or(0, GpuBuffer::capacity_bytes)
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Puts the items of `batch` in place of items `at..at + batch.len()`.
    ///
    /// Each replaced item must be of the same kind; a dispatch must run the same pipeline with a
    /// parameter block of the same size (its values, its buffers and its grid may change). A
    /// dispatch whose buffers are the same keeps its bind group. Nothing is replaced unless all
    /// of them fit.
    pub fn replace(&mut self, at: usize, mut batch: Batch<'_>) -> Result<(), GpuError> {
        let what = || {
            format!(
                "replacing items {at}.. of a recording of {}",
                self.items.len()
            )
        };
        if !std::ptr::eq(batch.gpu, self.gpu) {
            return Err(GpuError::bad_input(
                what(),
                "the batch was recorded on another device",
            ));
        }
        let end = at
            .checked_add(batch.items.len())
            .filter(|&end| end <= self.items.len())
            .ok_or_else(|| {
                GpuError::bad_input(
                    what(),
                    format!("{} items do not fit from {at}", batch.items.len()),
                )
            })?;
        let items = batch.compiled_items()?;
        for (k, (old, new)) in self.items[at..end].iter().zip(&items).enumerate() {
            let fits = match (old, new) {
                (Item::Dispatch(old), Item::Dispatch(new)) => {
                    old.pipeline == new.pipeline
                        && old.params.as_ref().map(|(b, p)| (*b, p.len()))
                            == new.params.as_ref().map(|(b, p)| (*b, p.len()))
                }
                (Item::Copy { .. }, Item::Copy { .. }) | (Item::Clear(_), Item::Clear(_)) => true,
                _ => false,
            };
            if !fits {
                return Err(GpuError::bad_input(
                    what(),
                    format!(
                        "item {} is not the same kind of work as the one it would replace",
                        at + k
                    ),
                ));
            }
        }
        let gpu = self.gpu;
        for (k, new) in items.into_iter().enumerate() {
            let i = at + k;
            // Kinds were checked above: a dispatch replaces a dispatch.
            match (&self.items[i], &new) {
                (Item::Dispatch(old), Item::Dispatch(d)) if old.grid != d.grid => {
                    self.generation.1 += 1;
                }
                (Item::Dispatch(_), Item::Dispatch(_)) => {}
                _ => self.generation.1 += 1,
            }
            if let (Item::Dispatch(old), Item::Dispatch(d)) = (&self.items[i], &new) {
                let same = old.buffers.len() == d.buffers.len()
                    && old
                        .buffers
                        .iter()
                        .zip(&d.buffers)
                        .all(|((b0, x), (b1, y))| b0 == b1 && x.same_memory(y));
                if let Some((_, block)) = &d.params {
                    self.arena.write(i, block);
                    self.dirty = true;
                }
                if !same {
                    self.generation.1 += 1;
                    let slot = self.arena.slot(i);
                    self.groups[i] = Some(scoped(
                        gpu.device(),
                        || format!("the bind group of `{}`", d.label),
                        || bind_group(gpu, d, slot),
                    )?);
                }
            }
            self.items[i] = new;
        }
        Ok(())
    }

    /// Uploads the parameter blocks where [`replace`](Self::replace) changed them.
    fn upload(&mut self) -> Result<(), GpuError> {
        if std::mem::take(&mut self.dirty) {
            self.arena.upload()?;
        }
        Ok(())
    }

    /// Sends every item in one submission, without waiting for it.
    pub fn submit(&mut self) -> Result<(), GpuError> {
        let encoded = self.encode()?;
        self.submit_encoded(encoded)
    }

    /// Encodes every item into commands to submit later with
    /// [`submit_encoded`](Self::submit_encoded): a training step encodes the next step's
    /// commands while the GPU runs this one, so that the next submission costs the host almost
    /// nothing. Parameter blocks changed in between still apply (they are read when the
    /// commands run); a replacement that changes a bind group, a grid, a copy or a clear makes
    /// the encoded commands stale, and they are encoded again at submission.
    pub fn encode(&self) -> Result<Encoded, GpuError> {
        Ok(Encoded {
            commands: self.encode_range(0..self.items.len())?,
            generation: self.generation,
        })
    }

    /// The commands of items `range` (within [`len`](Self::len)).
    fn encode_range(&self, range: Range<usize>) -> Result<wgpu::CommandBuffer, GpuError> {
        let gpu = self.gpu;
        let (items, end) = (&self.items, range.end);
        scoped(
            gpu.device(),
            || format!("a batch of {} dispatches and copies", range.len()),
            || {
                let mut encoder = encoder(gpu, "fblayout batch");
                let mut at = range.start;
                while at < end {
                    if let Item::Dispatch(_) = &items[at] {
                        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some("fblayout batch"),
                            timestamp_writes: None,
                        });
                        while let Some(Item::Dispatch(d)) = items.get(at).filter(|_| at < end) {
                            run(&mut pass, d, self.groups[at].as_ref());
                            at += 1;
                        }
                    } else {
                        record_transfer(&mut encoder, &items[at]);
                        at += 1;
                    }
                }
                encoder.finish()
            },
        )
    }

    /// Sends items `range` alone in one submission, without waiting for them, after uploading
    /// the parameter blocks changed since: a part of what was recorded (a training step's
    /// forward, to evaluate without its backward and update; its forward and backward, then
    /// its update, to accumulate gradients between). An error where `range` is not within the
    /// recording's [`len`](Self::len).
    pub fn submit_range(&mut self, range: Range<usize>) -> Result<(), GpuError> {
        if range.start > range.end || range.end > self.items.len() {
            return Err(GpuError::bad_input(
                format!("submitting items {range:?} of a recording"),
                format!("it has {} items", self.items.len()),
            ));
        }
        self.upload()?;
        let commands = self.encode_range(range.clone())?;
        let gpu = self.gpu;
        scoped(
            gpu.device(),
            || format!("submitting items {range:?} of a recording"),
            || {
                gpu.queue().submit([commands]);
            },
        )
    }

    /// Submits commands [encoded](Self::encode) from this recording, without waiting for them,
    /// after uploading the parameter blocks changed since; where a replacement made them stale,
    /// or another recording encoded them, this one's are encoded again first.
    pub fn submit_encoded(&mut self, encoded: Encoded) -> Result<(), GpuError> {
        self.upload()?;
        let commands = if encoded.generation == self.generation {
            encoded.commands
        } else {
            self.encode()?.commands
        };
        let gpu = self.gpu;
        scoped(
            gpu.device(),
            || format!("submitting a batch of {} items", self.items.len()),
            || {
                gpu.queue().submit([commands]);
            },
        )
    }

    /// Runs every item, waits, and returns the time of each dispatch (copies and clears are
    /// not timed), with GPU timestamps where the device has them.
    pub fn submit_timed(&mut self) -> Result<Vec<Timing>, GpuError> {
        self.upload()?;
        let gpu = self.gpu;
        let dispatches = self
            .items
            .iter()
            .filter(|i| matches!(i, Item::Dispatch(_)))
            .count() as u32;
        if dispatches == 0 {
            self.submit()?;
            gpu.wait()?;
            return Ok(Vec::new());
        }
        if !gpu.features().timestamps {
            let mut timings = Vec::new();
            for (at, item) in self.items.iter().enumerate() {
                let start = Instant::now();
                scoped(
                    gpu.device(),
                    || "a timed dispatch".to_owned(),
                    || {
                        let mut encoder = encoder(gpu, "fblayout timed");
                        match item {
                            Item::Dispatch(d) => {
                                let mut pass =
                                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                        label: Some(&d.label),
                                        timestamp_writes: None,
                                    });
                                run(&mut pass, d, self.groups[at].as_ref());
                            }
                            other => record_transfer(&mut encoder, other),
                        }
                        gpu.queue().submit([encoder.finish()]);
                    },
                )?;
                gpu.wait()?;
                if let Item::Dispatch(d) = item {
                    timings.push(Timing {
                        label: d.label.clone(),
                        section: d.section.clone(),
                        nanos: start.elapsed().as_secs_f64() * 1e9,
                        gpu_timestamps: false,
                    });
                }
            }
            return Ok(timings);
        }
        let queries = 2 * dispatches;
        let (resolve, readback) = scoped(
            gpu.device(),
            || "timestamp queries".to_owned(),
            || {
                // A query set holds at most `QUERY_SET_MAX_QUERIES` (an even number, so that a
                // dispatch's two timestamps share a set): a step of thousands of dispatches
                // takes several, each resolved into its place in one buffer.
                let per_set = wgpu::QUERY_SET_MAX_QUERIES;
                let sets: Vec<(wgpu::QuerySet, u32)> = (0..queries.div_ceil(per_set))
                    .map(|k| {
                        let count = per_set.min(queries - k * per_set);
                        let set = gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
                            label: Some("fblayout timestamps"),
                            ty: wgpu::QueryType::Timestamp,
                            count,
                        });
                        (set, count)
                    })
                    .collect();
                let bytes = u64::from(queries) * 8;
                let resolve = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("fblayout timestamps"),
                    size: bytes,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                let readback = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("fblayout timestamps read-back"),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                let mut encoder = encoder(gpu, "fblayout timed batch");
                let mut q = 0;
                for (at, item) in self.items.iter().enumerate() {
                    match item {
                        Item::Dispatch(d) => {
                            let mut pass =
                                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                    label: Some(&d.label),
                                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                                        query_set: &sets[(q / per_set) as usize].0,
                                        beginning_of_pass_write_index: Some(q % per_set),
                                        end_of_pass_write_index: Some(q % per_set + 1),
                                    }),
                                });
                            run(&mut pass, d, self.groups[at].as_ref());
                            q += 2;
                        }
                        other => record_transfer(&mut encoder, other),
                    }
                }
                for (k, (set, count)) in sets.iter().enumerate() {
                    // Each set's place is a multiple of 4096 × 8 bytes, so of the resolve
                    // alignment (256).
                    let at = u64::from(k as u32 * per_set) * 8;
                    encoder.resolve_query_set(set, 0..*count, &resolve, at);
                }
                encoder.copy_buffer_to_buffer(&resolve, 0, &readback, 0, bytes);
                gpu.queue().submit([encoder.finish()]);
                (resolve, readback)
            },
        )?;
        let ticks: Vec<u64> = map_read(gpu.device(), &readback, queries as usize * 8, || {
            "timestamps".to_owned()
        })?;
        drop(resolve);
        let period = f64::from(gpu.queue().get_timestamp_period());
        let labels = self.items.iter().filter_map(|i| match i {
            Item::Dispatch(d) => Some((d.label.clone(), d.section.clone())),
            _ => None,
        });
        Ok(labels
            .zip(ticks.chunks_exact(2))
            .map(|((label, section), t)| Timing {
                label,
                section,
                nanos: t[1].saturating_sub(t[0]) as f64 * period,
                gpu_timestamps: true,
            })
            .collect())
    }
}

fn encoder(gpu: &Gpu, label: &str) -> wgpu::CommandEncoder {
    gpu.device()
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
}

/// One uniform buffer holding every parameter block of a batch, and its host copy. Each
/// block is bound by its own range, so only a block, not the arena, must fit the device's
/// uniform binding limit.
struct Arena {
    buffer: Option<GpuBuffer>,
    bytes: Vec<u8>,
    /// For each item, the offset and size of its block.
    slots: Vec<Option<(u64, u64)>>,
}

impl Arena {
    fn new(gpu: &Gpu, items: &[Item]) -> Result<Self, GpuError> {
        let align = u64::from(gpu.limits().min_uniform_buffer_offset_alignment);
        let mut bytes = Vec::new();
        let mut slots = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Item::Dispatch(Dispatch {
                    params: Some((_, block)),
                    label,
                    ..
                }) => {
                    GpuBuffer::check_uniform_range(gpu, block.len() as u64, || {
                        format!("the parameter block of `{label}`")
                    })?;
                    let at = (bytes.len() as u64).next_multiple_of(align);
                    bytes.resize(at as usize, 0);
                    bytes.extend_from_slice(block);
                    slots.push(Some((at, block.len() as u64)));
                }
                _ => slots.push(None),
            }
        }
        let buffer = if bytes.is_empty() {
            None
        } else {
            Some(GpuBuffer::uniform_ranges(gpu, &bytes)?)
        };
        Ok(Self {
            buffer,
            bytes,
            slots,
        })
    }

    fn slot(&self, at: usize) -> Option<(&GpuBuffer, u64, u64)> {
        let (offset, size) = self.slots[at]?;
        Some((self.buffer.as_ref()?, offset, size))
    }

    /// Overwrites the host copy of item `at`'s block (of the size it was given).
    fn write(&mut self, at: usize, block: &[u8]) {
        if let Some((offset, size)) = self.slots[at] {
            let offset = offset as usize;
            self.bytes[offset..offset + size as usize].copy_from_slice(block);
        }
    }

    /// Sends the host copy to the buffer (ordered before later submissions).
    fn upload(&self) -> Result<(), GpuError> {
        match &self.buffer {
            Some(buffer) => buffer.write(&self.bytes),
            None => Ok(()),
        }
    }
}

/// The bind group of `d`: its buffers, and its parameter block at its slot of the arena.
fn bind_group(gpu: &Gpu, d: &Dispatch, params: Option<(&GpuBuffer, u64, u64)>) -> wgpu::BindGroup {
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = d
        .buffers
        .iter()
        .map(|(binding, buffer)| wgpu::BindGroupEntry {
            binding: *binding,
            resource: buffer.buffer().as_entire_binding(),
        })
        .collect();
    if let (Some((binding, _)), Some((buffer, offset, size))) = (&d.params, params) {
        entries.push(wgpu::BindGroupEntry {
            binding: *binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: buffer.buffer(),
                offset,
                size: NonZeroU64::new(size),
            }),
        });
    }
    gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(&d.label),
        layout: &d.pipeline.get_bind_group_layout(0),
        entries: &entries,
    })
}

/// Records dispatch `d` with its bind group into `pass`.
fn run(pass: &mut wgpu::ComputePass<'_>, d: &Dispatch, group: Option<&wgpu::BindGroup>) {
    pass.set_pipeline(&d.pipeline);
    pass.set_bind_group(0, group, &[]);
    let [x, y, z] = d.grid;
    pass.dispatch_workgroups(x, y, z);
}

fn record_transfer(encoder: &mut wgpu::CommandEncoder, item: &Item) {
    match item {
        Item::Copy { src, dst, bytes } => {
            encoder.copy_buffer_to_buffer(src.buffer(), 0, dst.buffer(), 0, *bytes);
        }
        Item::Clear(buffer) => encoder.clear_buffer(buffer.buffer(), 0, None),
        Item::Dispatch(_) => unreachable!("dispatches are recorded into passes"),
    }
}
