//! Batched submission: many dispatches, one command buffer, one submit.
//!
//! A [`Batch`] records dispatches of [`KernelModule`]s (with their operands bound by role and
//! their parameter blocks), buffer copies and clears, and sends them all to the GPU with one
//! [`Batch::submit`]. Nothing waits: results are read back only when asked
//! ([`GpuBuffer::read_back`]), and the queue keeps the recorded order. Every parameter block of a
//! batch lives in one uniform buffer, at offsets aligned as the device requires, so a batch of a
//! hundred dispatches allocates one buffer (from the pool) rather than a hundred.
//!
//! [`Batch::submit_timed`] runs the batch and says how long each dispatch took: from GPU
//! timestamps where the device has `TIMESTAMP_QUERY`, else from the wall clock around one
//! submission per dispatch.
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
use std::time::Instant;

use fblayout_core::kernel::{Access, KernelModule, ParamValue};

use super::buffer::{BufferKind, GpuBuffer, map_read};
use super::dispatch::{check_compute_entry, linear_grid};
use super::error::GpuError;
use super::gpu::{Gpu, scoped};

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

struct Dispatch {
    label: String,
    section: Option<String>,
    pipeline: wgpu::ComputePipeline,
    buffers: Vec<(u32, GpuBuffer)>,
    params: Option<(u32, Vec<u8>)>,
    grid: [u32; 3],
}

/// Work recorded for one submission (see the module docs).
pub struct Batch<'g> {
    gpu: &'g Gpu,
    items: Vec<Item>,
    section: Option<String>,
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
            section: None,
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

    /// Records `entry` of `kernel` over `grid` workgroups, with each operand's buffer given by
    /// role and every field of its parameter block given by name (see
    /// [`ParamsLayout::pack`](fblayout_core::kernel::ParamsLayout::pack)).
    ///
    /// Every operand must be bound exactly once, to a storage buffer; the grid must fit the
    /// device's limit per dimension. The kernel's pipeline is compiled here on first use.
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
        let pipeline = self.gpu.pipeline(module, entry)?;
        self.items.push(Item::Dispatch(Dispatch {
            label: format!("{}:{entry}", kernel.name()),
            section: self.section.clone(),
            pipeline,
            buffers: bound,
            params,
            grid,
        }));
        Ok(())
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
        self.items.push(Item::Copy {
            src: src.clone(),
            dst: dst.clone(),
            bytes: bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT),
        });
        Ok(())
    }

    /// Records zeroing the whole of `buffer`.
    pub fn clear(&mut self, buffer: &GpuBuffer) {
        self.items.push(Item::Clear(buffer.clone()));
    }

    /// Sends everything recorded in one submission, without waiting for it.
    pub fn submit(self) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let arena = Arena::new(gpu, &self.items)?;
        scoped(
            gpu.device(),
            || format!("a batch of {} dispatches and copies", self.items.len()),
            || {
                let mut encoder = encoder(gpu, "fblayout batch");
                let mut at = 0;
                while at < self.items.len() {
                    if let Item::Dispatch(_) = &self.items[at] {
                        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some("fblayout batch"),
                            timestamp_writes: None,
                        });
                        while let Some(Item::Dispatch(d)) = self.items.get(at) {
                            record(gpu, &mut pass, d, arena.slot(at));
                            at += 1;
                        }
                    } else {
                        record_transfer(&mut encoder, &self.items[at]);
                        at += 1;
                    }
                }
                gpu.queue().submit([encoder.finish()]);
            },
        )
    }

    /// Runs the batch, waits for it, and returns the time of each dispatch (copies and clears
    /// are not timed), with GPU timestamps where the device has them.
    pub fn submit_timed(self) -> Result<Vec<Timing>, GpuError> {
        let gpu = self.gpu;
        let arena = Arena::new(gpu, &self.items)?;
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
                                record(gpu, &mut pass, d, arena.slot(at));
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
                let set = gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("fblayout timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: queries,
                });
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
                                        query_set: &set,
                                        beginning_of_pass_write_index: Some(q),
                                        end_of_pass_write_index: Some(q + 1),
                                    }),
                                });
                            record(gpu, &mut pass, d, arena.slot(at));
                            q += 2;
                        }
                        other => record_transfer(&mut encoder, other),
                    }
                }
                encoder.resolve_query_set(&set, 0..queries, &resolve, 0);
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

/// One uniform buffer holding every parameter block of a batch.
struct Arena {
    buffer: Option<GpuBuffer>,
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
                    ..
                }) => {
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
            Some(GpuBuffer::uniform_bytes(gpu, &bytes)?)
        };
        Ok(Self { buffer, slots })
    }

    fn slot(&self, at: usize) -> Option<(&GpuBuffer, u64, u64)> {
        let (offset, size) = self.slots[at]?;
        Some((self.buffer.as_ref()?, offset, size))
    }
}

fn record(
    gpu: &Gpu,
    pass: &mut wgpu::ComputePass<'_>,
    d: &Dispatch,
    params: Option<(&GpuBuffer, u64, u64)>,
) {
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
    let bind_group = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(&d.label),
        layout: &d.pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    pass.set_pipeline(&d.pipeline);
    pass.set_bind_group(0, &bind_group, &[]);
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
