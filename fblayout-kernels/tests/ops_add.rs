//! Sums: against their definition on the CPU, and the GPU against the CPU, under every 2-D
//! layout and element type.

mod support;

use fblayout_kernels::ops::AddOp;
use fblayout_kernels::ops::add::add_cpu;
use support::{Layout2, Rng, Tensor, assert_close, gpu, gpu_elems, tolerance, view_2d};

#[test]
fn sums_match_their_definition_and_the_gpu_matches_the_cpu() {
    let gpu = gpu();
    let mut rng = Rng::new(11);
    for elem in gpu_elems() {
        for (i, al) in Layout2::ALL.into_iter().enumerate() {
            let bl = Layout2::ALL[(i + 2) % Layout2::ALL.len()];
            let yl = Layout2::ALL[(i + 5) % Layout2::ALL.len()];
            let (av, bind) = view_2d("a", al, 13, 36, elem);
            let (bv, _) = view_2d("b", bl, 13, 36, elem);
            let (yv, _) = view_2d("y", yl, 13, 36, elem);
            let a = Tensor::random(&mut rng, av, bind.clone(), -2.0, 2.0);
            let b = Tensor::random(&mut rng, bv, bind.clone(), -2.0, 2.0);
            let y = Tensor::new(yv, bind, vec![0.0; a.values.len()]);
            let want: Vec<f64> = a.values.iter().zip(&b.values).map(|(p, q)| p + q).collect();
            let (ah, bh) = (a.host::<f64>(), b.host::<f64>());
            let mut yh = y.host::<f64>();
            add_cpu(&a.arg(&ah), &b.arg(&bh), &mut y.arg_mut(&mut yh)).unwrap();
            assert_close(
                &format!("cpu {al:?}+{bl:?}→{yl:?}"),
                &y.read_host(&yh),
                &want,
                1e-15,
            );

            let op = AddOp::new(gpu, &a.view, &b.view, &y.view).unwrap();
            let (ab, bb, yb) = (a.upload(gpu), b.upload(gpu), y.poisoned(gpu));
            let mut batch = gpu.batch();
            op.forward(
                &mut batch,
                &a.gpu_arg(&ab),
                &b.gpu_arg(&bb),
                &y.gpu_arg(&yb),
            )
            .unwrap();
            batch.submit().unwrap();
            // The inputs as stored (f16 rounds them), summed exactly.
            let stored = |t: &Tensor| t.download(&t.upload(gpu));
            let want: Vec<f64> = stored(&a)
                .iter()
                .zip(stored(&b))
                .map(|(p, q)| p + q)
                .collect();
            assert_close(
                &format!("gpu {elem} {al:?}+{bl:?}→{yl:?}"),
                &y.download(&yb),
                &want,
                tolerance(elem, 1),
            );
        }
    }
}
