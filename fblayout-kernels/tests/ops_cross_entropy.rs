//! Cross-entropy: the loss against its definition, the gradient against finite differences,
//! and the GPU against the CPU under every 2-D layout of the logits, both element types, both
//! reduction paths, the gradient written apart and over the logits, ignored rows and labels out
//! of range; and rows taken in chunks (a fused
//! language-model head's) against the whole.

mod support;

use fblayout_core::layout::{ElemType, LayoutSpec, View};
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::cross_entropy::{
    check_labels, cross_entropy_backward_cpu, cross_entropy_forward_cpu,
};
use fblayout_kernels::ops::{CrossEntropyMean, CrossEntropyOp, CrossEntropyTotal, OpError};
use fblayout_kernels::runtime::Gpu;
use fblayout_kernels::tensor::{GpuArg, HostArg};
use support::{
    Layout2, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, gpus, tolerance,
    view_1d_dyn, view_2d,
};

const ROWS: u32 = 13;
const VOCAB: u32 = 36;
/// PyTorch's default `ignore_index` (−100) as a `u32`.
const IGNORE: u32 = -100i32 as u32;

/// Labels for `rows` rows: random below `vocab`, every third row ignored.
fn labels(rng: &mut Rng, rows: u32, vocab: u32) -> Vec<u32> {
    (0..rows)
        .map(|r| {
            if r % 3 == 1 {
                IGNORE
            } else {
                rng.below(u64::from(vocab)) as u32
            }
        })
        .collect()
}

/// The losses of dense row-major logits `[rows, vocab]` from the definition
/// `−log(exp(x_t) / Σ exp(x_j))`, 0 for ignored rows, and their mean over the rows that count.
fn reference(x: &[f64], vocab: usize, labels: &[u32]) -> (Vec<f64>, f64) {
    let losses: Vec<f64> = x
        .chunks(vocab)
        .zip(labels)
        .map(|(row, &t)| {
            if t == IGNORE {
                return 0.0;
            }
            let sum: f64 = row.iter().map(|v| v.exp()).sum();
            -(row[t as usize].exp() / sum).ln()
        })
        .collect();
    let n = labels.iter().filter(|&&t| t != IGNORE).count();
    (losses.clone(), losses.iter().sum::<f64>() / n as f64)
}

struct Case {
    logits: Tensor,
    loss: Tensor,
    labels: Vec<u32>,
    labels_view: View,
}

impl Case {
    fn new(rng: &mut Rng, layout: Layout2, rows: u32, vocab: u32, elem: ElemType) -> Self {
        let (view, bind) = view_2d("logits", layout, rows, vocab, elem);
        let logits = Tensor::random(rng, view, bind.clone(), -4.0, 4.0);
        let loss = Tensor::new(
            view_1d_dyn("loss", "rows", rows, elem).0,
            bind,
            vec![0.0; rows as usize],
        );
        Self {
            logits,
            loss,
            labels: labels(rng, rows, vocab),
            labels_view: view_1d_dyn("labels", "rows", rows, ElemType::U32).0,
        }
    }

    fn rows(&self) -> u32 {
        self.labels.len() as u32
    }

    fn labels_arg<'a>(
        &'a self,
        data: &'a [u32],
    ) -> HostArg<'a, u32, fblayout_kernels::cpu::OffsetTable> {
        let bound = self.labels_view.bind(&[("rows", self.rows())]).unwrap();
        HostArg::bound(data, &bound).unwrap()
    }

    fn cpu_forward<T: Real>(&self, logits: &Tensor) -> (Vec<f64>, CrossEntropyMean) {
        let xs = logits.host::<T>();
        let mut ls = self.loss.host::<T>();
        let mean = cross_entropy_forward_cpu(
            IGNORE,
            &logits.arg(&xs),
            &self.labels_arg(&self.labels),
            &mut self.loss.arg_mut(&mut ls),
        )
        .unwrap();
        (self.loss.read_host(&ls), mean)
    }

    fn cpu_backward<T: Real>(&self, dloss: f64) -> Vec<f64> {
        let xs = self.logits.host::<T>();
        let mut ds = self.logits.host::<T>();
        cross_entropy_backward_cpu(
            IGNORE,
            dloss,
            &self.logits.arg(&xs),
            &self.labels_arg(&self.labels),
            &mut self.logits.arg_mut(&mut ds),
        )
        .unwrap();
        self.logits.read_host(&ds)
    }

    /// Forward and backward on `gpu`: per-row loss, mean, count and gradient; `in_place`, the
    /// gradient written over the logits.
    fn gpu(&self, gpu: &Gpu, dloss: f32, in_place: bool) -> (Vec<f64>, f32, u32, Vec<f64>) {
        let op = CrossEntropyOp::new(
            gpu,
            &self.logits.view,
            &self.labels_view,
            &self.loss.view,
            IGNORE,
        )
        .unwrap();
        let state = op.state(gpu, self.rows()).unwrap();
        let (xb, lb, tb, db) = (
            self.logits.upload(gpu),
            self.loss.poisoned(gpu),
            GpuBuffer::from_slice(gpu, &self.labels).unwrap(),
            self.logits.poisoned(gpu),
        );
        let labels = GpuArg::new(&tb, &self.labels_view, &[("rows", self.rows())]).unwrap();
        let mut batch = gpu.batch();
        op.forward(
            &mut batch,
            &self.logits.gpu_arg(&xb),
            &labels,
            &self.loss.gpu_arg(&lb),
            &state,
        )
        .unwrap();
        let grad = if in_place { &xb } else { &db };
        op.backward(
            &mut batch,
            &self.logits.gpu_arg(&xb),
            &labels,
            &state,
            dloss,
            &self.logits.gpu_arg(grad),
        )
        .unwrap();
        batch.submit().unwrap();
        (
            self.loss.download(&lb),
            state.mean().unwrap(),
            state.count().unwrap(),
            self.logits.download(grad),
        )
    }
}

#[test]
fn forward_matches_the_definition_on_the_cpu_under_every_layout() {
    let mut rng = Rng::new(1);
    for layout in Layout2::ALL {
        let case = Case::new(&mut rng, layout, ROWS, VOCAB, ElemType::F32);
        let (losses, mean) = case.cpu_forward::<f64>(&case.logits);
        let (want, want_mean) = reference(&case.logits.values, VOCAB as usize, &case.labels);
        assert_close(&format!("{layout:?}"), &losses, &want, 1e-13);
        assert!(
            (mean.mean - want_mean).abs() < 1e-13,
            "{layout:?}: mean {mean:?}"
        );
        assert_eq!(
            mean.count,
            case.labels.iter().filter(|&&t| t != IGNORE).count() as u32
        );
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(2);
    for layout in [Layout2::RowMajor, Layout2::RTile(4), Layout2::RowMajorT] {
        for dloss in [1.0, -2.5] {
            let case = Case::new(&mut rng, layout, 5, 12, ElemType::F32);
            let got = case.cpu_backward::<f64>(dloss);
            let want = finite_differences(&case.logits.values, 1e-6, |v| {
                dloss
                    * case
                        .cpu_forward::<f64>(&case.logits.with_values(v.to_vec()))
                        .1
                        .mean
            });
            assert_close(&format!("{layout:?} dloss {dloss}"), &got, &want, 1e-8);
        }
    }
}

fn check_gpu(gpu: &Gpu, what: &str, case: &Case) {
    check_gpu_once(gpu, what, case, false);
    check_gpu_once(gpu, &format!("{what}, in place"), case, true);
}

fn check_gpu_once(gpu: &Gpu, what: &str, case: &Case, in_place: bool) {
    let elem = case.logits.elem();
    let dloss = 1.5;
    let (loss, mean, count, grad) = case.gpu(gpu, dloss as f32, in_place);
    let ((want_loss, want_mean), want_grad) = match elem {
        ElemType::F16 => (
            case.cpu_forward::<half::f16>(&case.logits),
            case.cpu_backward::<half::f16>(dloss),
        ),
        _ => (
            case.cpu_forward::<f32>(&case.logits),
            case.cpu_backward::<f32>(dloss),
        ),
    };
    let vocab = case.logits.dims()[1];
    let tol = tolerance(elem, vocab);
    assert_close(&format!("{what}: loss"), &loss, &want_loss, tol);
    assert_close(
        &format!("{what}: mean"),
        &[f64::from(mean)],
        &[want_mean.mean],
        tolerance(elem, case.labels.len()),
    );
    assert_eq!(count, want_mean.count, "{what}: count");
    // The gradient is about 1/(vocab · n_valid): compared at that scale.
    let scale = (vocab as f64) * f64::from(count.max(1));
    let scaled = |v: &[f64]| -> Vec<f64> { v.iter().map(|g| g * scale).collect() };
    assert_close(
        &format!("{what}: dlogits"),
        &scaled(&grad),
        &scaled(&want_grad),
        tol,
    );
}

#[test]
fn gpu_matches_cpu_under_every_layout_element_type_and_reduction_path() {
    let mut rng = Rng::new(3);
    for (path, gpu) in gpus() {
        for elem in gpu_elems() {
            for layout in Layout2::ALL {
                let case = Case::new(&mut rng, layout, ROWS, VOCAB, elem);
                check_gpu(gpu, &format!("{path} {elem} {layout:?}"), &case);
            }
        }
    }
}

/// A language-model head's chunks ([`CrossEntropyOp::forward_rows`] over slices of the rows,
/// one [`CrossEntropyTotal`] over all of them, [`CrossEntropyOp::backward_counted`] per slice)
/// give what one cross-entropy over every row gives on the CPU.
#[test]
fn rows_taken_in_chunks_with_one_total_are_the_whole() {
    let mut rng = Rng::new(7);
    let gpu = gpu();
    for elem in gpu_elems() {
        for layout in [Layout2::RowMajor, Layout2::RTile(4), Layout2::RowMajorT] {
            let what = format!("{elem} {layout:?}");
            let case = Case::new(&mut rng, layout, ROWS, VOCAB, elem);
            let rows = case.rows();
            let dloss = 1.5f32;
            let (xb, lb, db) = (
                case.logits.upload(gpu),
                case.loss.poisoned(gpu),
                case.logits.poisoned(gpu),
            );
            let tb = GpuBuffer::from_slice(gpu, &case.labels).unwrap();
            let labels = GpuArg::new(&tb, &case.labels_view, &[("rows", rows)]).unwrap();
            let (logits, loss, dlogits) = (
                case.logits.gpu_arg(&xb),
                case.loss.gpu_arg(&lb),
                case.logits.gpu_arg(&db),
            );
            let slice = |v: &View, start: u32, len: u32| {
                let axis = v.axes()[0].name.clone();
                v.slice(&axis, start, len).unwrap()
            };
            // Chunks of 5, 5 and 3 rows.
            let chunks: Vec<_> = [(0, 5), (5, 5), (10, 3)]
                .into_iter()
                .map(|(start, len)| {
                    let views = [
                        slice(&case.logits.view, start, len),
                        slice(&case.labels_view, start, len),
                        slice(&case.loss.view, start, len),
                    ];
                    let op =
                        CrossEntropyOp::new(gpu, &views[0], &views[1], &views[2], IGNORE).unwrap();
                    let state = op.state(gpu, len).unwrap();
                    (views, op, state)
                })
                .collect();
            let total =
                CrossEntropyTotal::new(gpu, &case.labels_view, &case.loss.view, IGNORE).unwrap();
            let all = total.state(gpu, rows).unwrap();
            let mut batch = gpu.batch();
            for ([x, t, l], op, state) in &chunks {
                let (x, t, l) = (
                    logits.through(x).unwrap(),
                    labels.through(t).unwrap(),
                    loss.through(l).unwrap(),
                );
                op.forward_rows(&mut batch, &x, &t, &l, state).unwrap();
            }
            total.record(&mut batch, &labels, &loss, &all).unwrap();
            for ([x, t, _], op, state) in &chunks {
                let (dx, x, t) = (
                    dlogits.through(x).unwrap(),
                    logits.through(x).unwrap(),
                    labels.through(t).unwrap(),
                );
                op.backward_counted(&mut batch, &x, &t, state, &all, dloss, &dx)
                    .unwrap();
            }
            batch.submit().unwrap();

            let ((want_loss, want_mean), want_grad) = match elem {
                ElemType::F16 => (
                    case.cpu_forward::<half::f16>(&case.logits),
                    case.cpu_backward::<half::f16>(f64::from(dloss)),
                ),
                _ => (
                    case.cpu_forward::<f32>(&case.logits),
                    case.cpu_backward::<f32>(f64::from(dloss)),
                ),
            };
            let tol = tolerance(elem, VOCAB as usize);
            assert_close(
                &format!("{what}: loss"),
                &case.loss.download(&lb),
                &want_loss,
                tol,
            );
            assert_close(
                &format!("{what}: mean"),
                &[f64::from(all.mean().unwrap())],
                &[want_mean.mean],
                tolerance(elem, ROWS as usize),
            );
            assert_eq!(all.count().unwrap(), want_mean.count, "{what}: count");
            let scale = f64::from(VOCAB) * f64::from(want_mean.count);
            let scaled = |v: &[f64]| -> Vec<f64> { v.iter().map(|g| g * scale).collect() };
            assert_close(
                &format!("{what}: dlogits"),
                &scaled(&case.logits.download(&db)),
                &scaled(&want_grad),
                tol,
            );
        }
    }
    // The total refuses labels that are not u32, as the cross-entropy does, and a loss that
    // is not one value a row.
    let case = Case::new(&mut rng, Layout2::RowMajor, ROWS, VOCAB, ElemType::F32);
    let float_labels = view_1d_dyn("labels", "rows", ROWS, ElemType::F32).0;
    let err = CrossEntropyTotal::new(gpu, &float_labels, &case.loss.view, IGNORE).unwrap_err();
    assert!(err.to_string().contains("labels are u32"), "{err}");
    let err =
        CrossEntropyTotal::new(gpu, &case.labels_view, &case.logits.view, IGNORE).unwrap_err();
    assert!(err.to_string().contains("rank 2"), "{err}");
}

#[test]
fn long_rows_and_a_run_time_vocabulary() {
    let mut rng = Rng::new(4);
    for (path, gpu) in gpus() {
        for (vocab, layout) in [
            (3001, Layout2::RowMajor),
            (9002, Layout2::RTile(4)),
            (30522, Layout2::RowMajor),
        ] {
            let case = Case::new(&mut rng, layout, 5, vocab, ElemType::F32);
            check_gpu(gpu, &format!("{path} {vocab} {layout:?}"), &case);
        }
        let view = LayoutSpec::new("logits")
            .dyn_axis("rows")
            .dyn_axis("cols")
            .build()
            .unwrap()
            .view();
        for vocab in [7, 700] {
            let bind = vec![("rows".to_owned(), 6), ("cols".to_owned(), vocab)];
            let mut case = Case::new(&mut rng, Layout2::RowMajor, 6, vocab, ElemType::F32);
            case.logits = Tensor::random(&mut rng, view.clone(), bind, -4.0, 4.0);
            check_gpu(gpu, &format!("{path} run-time {vocab}"), &case);
        }
    }
}

#[test]
fn when_every_row_is_ignored_the_mean_and_the_gradient_are_zero() {
    let gpu = gpu();
    let mut rng = Rng::new(5);
    let mut case = Case::new(&mut rng, Layout2::RTile(8), ROWS, VOCAB, ElemType::F32);
    case.labels = vec![IGNORE; ROWS as usize];
    let (loss, mean, count, grad) = case.gpu(gpu, 1.0, false);
    assert_eq!((mean, count), (0.0, 0));
    assert!(loss.iter().chain(&grad).all(|&v| v == 0.0));
    let (_, cpu) = case.cpu_forward::<f32>(&case.logits);
    assert_eq!(
        cpu,
        CrossEntropyMean {
            mean: 0.0,
            count: 0
        }
    );
}

#[test]
fn a_label_out_of_range_is_an_error_on_the_host_and_nan_on_the_gpu() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let mut case = Case::new(&mut rng, Layout2::RowMajor, ROWS, VOCAB, ElemType::F32);
    case.labels[4] = VOCAB;
    let err = check_labels(&case.labels_arg(&case.labels), VOCAB as usize, IGNORE).unwrap_err();
    assert!(
        matches!(
            err,
            OpError::OutOfRange {
                position: 4,
                value: 36,
                limit: 36,
                ..
            }
        ),
        "{err}"
    );
    let xs = case.logits.host::<f32>();
    let mut ls = case.loss.host::<f32>();
    let err = cross_entropy_forward_cpu(
        IGNORE,
        &case.logits.arg(&xs),
        &case.labels_arg(&case.labels),
        &mut case.loss.arg_mut(&mut ls),
    )
    .unwrap_err();
    assert!(matches!(err, OpError::OutOfRange { .. }), "{err}");

    let (loss, mean, _, grad) = case.gpu(gpu, 1.0, false);
    assert!(mean.is_nan(), "the mean of a batch with a bad label is NaN");
    let vocab = VOCAB as usize;
    for (r, (l, g)) in loss.iter().zip(grad.chunks(vocab)).enumerate() {
        if r == 4 {
            assert!(l.is_nan() && g.iter().all(|v| v.is_nan()), "row {r}");
        } else {
            assert!(l.is_finite() && g.iter().all(|v| v.is_finite()), "row {r}");
        }
    }
}

#[test]
fn bad_shapes_element_types_and_states_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(7);
    let case = Case::new(&mut rng, Layout2::RowMajor, ROWS, VOCAB, ElemType::F32);
    let (x, t, l) = (&case.logits.view, &case.labels_view, &case.loss.view);
    let err = CrossEntropyOp::new(gpu, l, t, l, IGNORE).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let err = CrossEntropyOp::new(gpu, x, l, l, IGNORE).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "labels", .. }),
        "{err}"
    );
    let err = CrossEntropyOp::new(gpu, x, t, t, IGNORE).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "loss", .. }),
        "{err}"
    );
    let fixed = support::view_1d("labels", "rows", ROWS + 1, ElemType::U32);
    let static_rows = LayoutSpec::new("logits")
        .axis("rows", ROWS)
        .axis("cols", VOCAB)
        .build()
        .unwrap()
        .view();
    let err = CrossEntropyOp::new(gpu, &static_rows, &fixed, l, IGNORE).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");

    let op = CrossEntropyOp::new(gpu, x, t, l, IGNORE).unwrap();
    assert!(matches!(op.state(gpu, 0), Err(OpError::Shape { .. })));
    let state = op.state(gpu, ROWS + 1).unwrap();
    let (xb, lb) = (case.logits.upload(gpu), case.loss.poisoned(gpu));
    let tb = GpuBuffer::from_slice(gpu, &case.labels).unwrap();
    let labels = GpuArg::new(&tb, t, &[("rows", ROWS)]).unwrap();
    let mut batch = gpu.batch();
    let err = op
        .forward(
            &mut batch,
            &case.logits.gpu_arg(&xb),
            &labels,
            &case.loss.gpu_arg(&lb),
            &state,
        )
        .unwrap_err();
    assert!(
        matches!(err, OpError::Shape { .. }),
        "a state for another row count: {err}"
    );
    let state = op.state(gpu, ROWS).unwrap();
    let few = GpuArg::new(&tb, t, &[("rows", ROWS - 1)]).unwrap();
    let err = op
        .forward(
            &mut batch,
            &case.logits.gpu_arg(&xb),
            &few,
            &case.loss.gpu_arg(&lb),
            &state,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let (cm, _) = view_2d("logits", Layout2::ColMajor, ROWS, VOCAB, ElemType::F32);
    let cm = Tensor::random(&mut rng, cm, case.logits.bind.clone(), -1.0, 1.0);
    let cmb = cm.upload(gpu);
    let err = op
        .backward(
            &mut batch,
            &case.logits.gpu_arg(&xb),
            &labels,
            &state,
            1.0,
            &cm.gpu_arg(&cmb),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            OpError::WrongView {
                role: "dlogits",
                ..
            }
        ),
        "{err}"
    );
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}
