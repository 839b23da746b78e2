//! GELU, SiLU, tanh and SwiGLU: forward against their definitions, backward against finite
//! differences, and the GPU against the CPU, under every 2-D layout and element type.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::ops::activation::{
    activation_backward_cpu, activation_forward_cpu, swiglu_backward_cpu, swiglu_forward_cpu,
};
use fblayout_kernels::ops::{Activation, ActivationOp, OpError, SwigluOp};
use support::{Layout2, Rng, Tensor, assert_close, gpu, gpu_elems, tolerance, view_2d};

/// erf by its Maclaurin series (exact to f64 round-off for |x| ≤ 3): the definition, not the
/// kernels' approximation.
fn erf_series(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn reference(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Gelu => 0.5 * x * (1.0 + erf_series(x / 2f64.sqrt())),
        Activation::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Tanh => {
            let (e, f) = (x.exp(), (-x).exp());
            (e - f) / (e + f)
        }
    }
}

const ACTIVATIONS: [Activation; 4] = [
    Activation::Gelu,
    Activation::GeluTanh,
    Activation::Silu,
    Activation::Tanh,
];

/// Rows that no tile divides; columns that 4 divides but 8 does not.
const ROWS: u32 = 13;
const COLS: u32 = 36;

/// Pairs of (input, output) layouts: each layout once as input and once as output.
fn layout_pairs() -> impl Iterator<Item = (Layout2, Layout2)> {
    Layout2::ALL
        .into_iter()
        .zip(Layout2::ALL.into_iter().rev())
        .chain([
            (Layout2::RowMajor, Layout2::RowMajor),
            (Layout2::RTile(4), Layout2::RTile(4)),
        ])
}

fn tensors(rng: &mut Rng, xl: Layout2, yl: Layout2, elem: ElemType) -> (Tensor, Tensor) {
    let (xv, bind) = view_2d("x", xl, ROWS, COLS, elem);
    let x = Tensor::random(rng, xv, bind.clone(), -3.0, 3.0);
    let (yv, _) = view_2d("y", yl, ROWS, COLS, elem);
    let y = Tensor::new(yv, bind, vec![0.0; x.values.len()]);
    (x, y)
}

fn cpu_forward<T: fblayout_kernels::cpu::Real>(
    act: Activation,
    x: &Tensor,
    y: &Tensor,
) -> Vec<f64> {
    let xs = x.host::<T>();
    let mut ys = y.host::<T>();
    activation_forward_cpu(act, &x.arg(&xs), &mut y.arg_mut(&mut ys)).unwrap();
    y.read_host(&ys)
}

fn cpu_backward<T: fblayout_kernels::cpu::Real>(
    act: Activation,
    x: &Tensor,
    dy: &Tensor,
    dx: &Tensor,
) -> Vec<f64> {
    let xs = x.host::<T>();
    let dys = dy.host::<T>();
    let mut dxs = dx.host::<T>();
    activation_backward_cpu(act, &x.arg(&xs), &dy.arg(&dys), &mut dx.arg_mut(&mut dxs)).unwrap();
    dx.read_host(&dxs)
}

#[test]
fn forward_matches_the_definition_on_the_cpu_under_every_layout() {
    let mut rng = Rng::new(1);
    for act in ACTIVATIONS {
        for (xl, yl) in layout_pairs() {
            let (x, y) = tensors(&mut rng, xl, yl, ElemType::F32);
            let got = cpu_forward::<f64>(act, &x, &y);
            let want: Vec<f64> = x.values.iter().map(|&v| reference(act, v)).collect();
            // Abramowitz and Stegun's erf is within 1.5e-7 of the true one, and GELU scales
            // that error by |x|/2 ≤ 1.5.
            assert_close(&format!("{act:?} {xl:?} → {yl:?}"), &got, &want, 2.5e-7);
        }
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(2);
    let h = 1e-5;
    for act in ACTIVATIONS {
        for (xl, yl) in layout_pairs() {
            let (x, y) = tensors(&mut rng, xl, yl, ElemType::F32);
            let dy = Tensor::random(&mut rng, y.view.clone(), y.bind.clone(), -1.0, 1.0);
            let dx = x.with_values(vec![0.0; x.values.len()]);
            let got = cpu_backward::<f64>(act, &x, &dy, &dx);
            // Elementwise, so every element can be perturbed at once.
            let shifted = |s: f64| x.with_values(x.values.iter().map(|v| v + s).collect());
            let up = cpu_forward::<f64>(act, &shifted(h), &y);
            let down = cpu_forward::<f64>(act, &shifted(-h), &y);
            let want: Vec<f64> = (0..up.len())
                .map(|i| dy.values[i] * (up[i] - down[i]) / (2.0 * h))
                .collect();
            assert_close(&format!("d{act:?} {xl:?} → {yl:?}"), &got, &want, 2e-6);
        }
    }
}

#[test]
fn gpu_matches_cpu_forward_and_backward_under_every_layout_and_element_type() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    for elem in gpu_elems() {
        for act in ACTIVATIONS {
            for (xl, yl) in layout_pairs() {
                let what = format!("{act:?} {elem} {xl:?} → {yl:?}");
                let (x, y) = tensors(&mut rng, xl, yl, elem);
                let dy = Tensor::random(&mut rng, y.view.clone(), y.bind.clone(), -1.0, 1.0);
                let op = ActivationOp::new(gpu, act, &x.view, &y.view).unwrap();
                let (xb, yb, dyb, dxb) = (
                    x.upload(gpu),
                    y.poisoned(gpu),
                    dy.upload(gpu),
                    x.poisoned(gpu),
                );
                let mut batch = gpu.batch();
                op.forward(&mut batch, &x.gpu_arg(&xb), &y.gpu_arg(&yb))
                    .unwrap();
                op.backward(
                    &mut batch,
                    &x.gpu_arg(&xb),
                    &dy.gpu_arg(&dyb),
                    &x.gpu_arg(&dxb),
                )
                .unwrap();
                batch.submit().unwrap();
                let (want_y, want_dx) = match elem {
                    ElemType::F16 => (
                        cpu_forward::<half::f16>(act, &x, &y),
                        cpu_backward::<half::f16>(act, &x, &dy, &x),
                    ),
                    _ => (
                        cpu_forward::<f32>(act, &x, &y),
                        cpu_backward::<f32>(act, &x, &dy, &x),
                    ),
                };
                let tol = tolerance(elem, 8);
                assert_close(&format!("{what}: y"), &y.download(&yb), &want_y, tol);
                assert_close(&format!("{what}: dx"), &x.download(&dxb), &want_dx, tol);
            }
        }
    }
}

#[test]
fn swiglu_matches_its_definition_finite_differences_and_the_cpu() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let h = 1e-5;
    for (gl, ul) in layout_pairs() {
        let (gv, bind) = view_2d("gate", gl, ROWS, COLS, ElemType::F32);
        let (uv, _) = view_2d("up", ul, ROWS, COLS, ElemType::F32);
        let (yv, _) = view_2d("y", Layout2::RTile(4), ROWS, COLS, ElemType::F32);
        let gate = Tensor::random(&mut rng, gv, bind.clone(), -3.0, 3.0);
        let up = Tensor::random(&mut rng, uv, bind.clone(), -2.0, 2.0);
        let y = Tensor::new(yv, bind.clone(), vec![0.0; gate.values.len()]);
        let dy = Tensor::random(&mut rng, y.view.clone(), bind, -1.0, 1.0);
        let forward = |gate: &Tensor, up: &Tensor| {
            let (g, u) = (gate.host::<f64>(), up.host::<f64>());
            let mut ys = y.host::<f64>();
            swiglu_forward_cpu(&gate.arg(&g), &up.arg(&u), &mut y.arg_mut(&mut ys)).unwrap();
            y.read_host(&ys)
        };
        let want: Vec<f64> = (0..gate.values.len())
            .map(|i| silu(gate.values[i]) * up.values[i])
            .collect();
        assert_close(
            &format!("swiglu {gl:?} {ul:?}"),
            &forward(&gate, &up),
            &want,
            1e-12,
        );

        let (g, u, d) = (gate.host::<f64>(), up.host::<f64>(), dy.host::<f64>());
        let (mut dg, mut du) = (gate.host::<f64>(), up.host::<f64>());
        swiglu_backward_cpu(
            &gate.arg(&g),
            &up.arg(&u),
            &dy.arg(&d),
            &mut gate.arg_mut(&mut dg),
            &mut up.arg_mut(&mut du),
        )
        .unwrap();
        let shift = |t: &Tensor, s: f64| t.with_values(t.values.iter().map(|v| v + s).collect());
        let fd = |plus: Vec<f64>, minus: Vec<f64>| -> Vec<f64> {
            (0..plus.len())
                .map(|i| dy.values[i] * (plus[i] - minus[i]) / (2.0 * h))
                .collect()
        };
        let want_dg = fd(
            forward(&shift(&gate, h), &up),
            forward(&shift(&gate, -h), &up),
        );
        let want_du = fd(
            forward(&gate, &shift(&up, h)),
            forward(&gate, &shift(&up, -h)),
        );
        assert_close("d gate", &gate.read_host(&dg), &want_dg, 2e-6);
        assert_close("d up", &up.read_host(&du), &want_du, 2e-6);

        let op = SwigluOp::new(gpu, &gate.view, &up.view, &y.view).unwrap();
        let (gb, ub, yb, dyb) = (
            gate.upload(gpu),
            up.upload(gpu),
            y.poisoned(gpu),
            dy.upload(gpu),
        );
        let (dgb, dub) = (gate.poisoned(gpu), up.poisoned(gpu));
        let mut batch = gpu.batch();
        op.forward(
            &mut batch,
            &gate.gpu_arg(&gb),
            &up.gpu_arg(&ub),
            &y.gpu_arg(&yb),
        )
        .unwrap();
        op.backward(
            &mut batch,
            &gate.gpu_arg(&gb),
            &up.gpu_arg(&ub),
            &dy.gpu_arg(&dyb),
            &gate.gpu_arg(&dgb),
            &up.gpu_arg(&dub),
        )
        .unwrap();
        batch.submit().unwrap();
        let tol = tolerance(ElemType::F32, 8);
        assert_close("gpu y", &y.download(&yb), &want, tol);
        assert_close(
            "gpu d gate",
            &gate.download(&dgb),
            &gate.read_host(&dg),
            tol,
        );
        assert_close("gpu d up", &up.download(&dub), &up.read_host(&du), tol);
    }
}

#[test]
fn contiguous_layouts_move_four_elements_per_invocation() {
    let gpu = gpu();
    let v = |l| view_2d("x", l, ROWS, COLS, ElemType::F32).0;
    let wide = |a, b| {
        ActivationOp::new(gpu, Activation::Silu, &v(a), &v(b))
            .unwrap()
            .is_vectorized()
    };
    assert!(wide(Layout2::RowMajor, Layout2::RowMajor));
    assert!(wide(Layout2::RTile(4), Layout2::RowMajor));
    assert!(wide(Layout2::RTile(8), Layout2::RTile(4)));
    assert!(!wide(Layout2::ColMajor, Layout2::RowMajor));
    assert!(!wide(Layout2::RowMajor, Layout2::RowMajorT));
}

#[test]
fn mismatched_shapes_and_views_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(5);
    let (x, y) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        ElemType::F32,
    );
    let (wide, wide_bind) = view_2d("w", Layout2::RowMajor, ROWS, COLS + 4, ElemType::F32);
    let err = ActivationOp::new(gpu, Activation::Gelu, &x.view, &wide).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");

    let op = ActivationOp::new(gpu, Activation::Gelu, &x.view, &y.view).unwrap();
    // Other run-time extents: 14 rows against 13.
    let taller = Tensor::random(
        &mut rng,
        y.view.clone(),
        vec![("rows".into(), ROWS + 1)],
        -1.0,
        1.0,
    );
    let (xb, tb) = (x.upload(gpu), taller.upload(gpu));
    let mut batch = gpu.batch();
    let err = op
        .forward(&mut batch, &x.gpu_arg(&xb), &taller.gpu_arg(&tb))
        .unwrap_err();
    assert!(err.to_string().contains("shape"), "{err}");
    // Another view than the kernel was built for.
    let w = Tensor::random(&mut rng, wide, wide_bind, -1.0, 1.0);
    let wb = w.upload(gpu);
    let err = op
        .forward(&mut batch, &x.gpu_arg(&xb), &w.gpu_arg(&wb))
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { .. } | OpError::Shape { .. }),
        "{err}"
    );
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}

#[test]
fn without_shader_f16_an_f16_tensor_is_refused_with_its_cause_and_f32_still_runs() {
    use fblayout_kernels::runtime::{Disabled, Gpu, GpuOptions};
    let mut options = GpuOptions::from_env().unwrap();
    options.disabled = Disabled {
        f16: true,
        ..options.disabled
    };
    options.cache_dir = None;
    let gpu = Gpu::with_options(options).unwrap();
    assert!(!gpu.features().f16);
    let (x16, _) = view_2d("x", Layout2::RowMajor, ROWS, COLS, ElemType::F16);
    let err = ActivationOp::new(&gpu, Activation::Silu, &x16, &x16).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, OpError::Kernel(_)) && message.contains("SHADER_F16"),
        "{message}"
    );
    // The f32 path is the fallback, and runs.
    let mut rng = Rng::new(6);
    let (x, y) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RTile(4),
        ElemType::F32,
    );
    let op = ActivationOp::new(&gpu, Activation::Silu, &x.view, &y.view).unwrap();
    let (xb, yb) = (x.upload(&gpu), y.poisoned(&gpu));
    let mut batch = gpu.batch();
    op.forward(&mut batch, &x.gpu_arg(&xb), &y.gpu_arg(&yb))
        .unwrap();
    batch.submit().unwrap();
    let want = cpu_forward::<f32>(Activation::Silu, &x, &y);
    assert_close(
        "f32 fallback",
        &y.download(&yb),
        &want,
        tolerance(ElemType::F32, 8),
    );
}
