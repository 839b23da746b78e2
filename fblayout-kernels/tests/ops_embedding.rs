//! Embedding: the lookup and the scatter-add against their definitions and finite differences,
//! the GPU against the CPU under every 2-D layout of the table and the output, both element
//! types, overwriting and accumulating gradients; bad ids and mismatched shapes as errors.

mod support;

use fblayout_core::layout::ElemType;
use fblayout_kernels::GpuBuffer;
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::embedding::{embedding_backward_cpu, embedding_forward_cpu};
use fblayout_kernels::ops::{EmbeddingOp, OpError, TokenIds};
use fblayout_kernels::runtime::Gpu;
use fblayout_kernels::tensor::GpuArg;
use support::{
    Layout2, Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, layout_pairs,
    tolerance, view_2d,
};

const VOCAB: u32 = 37;
const HIDDEN: u32 = 36;
const TOKENS: u32 = 29;

/// Ids with repeats: `tokens` draws from the first half of the vocabulary (so some rows are
/// used several times and others never).
fn ids(rng: &mut Rng, tokens: u32, vocab: u32) -> Vec<u32> {
    (0..tokens)
        .map(|_| rng.below(u64::from(vocab.div_ceil(2))) as u32)
        .collect()
}

/// A table `[vocab, hidden]` stored as `tl` and an output `[tokens, hidden]` stored as `ol`.
fn tensors(
    rng: &mut Rng,
    tl: Layout2,
    ol: Layout2,
    dims: (u32, u32, u32),
    elem: ElemType,
) -> (Tensor, Tensor) {
    let (vocab, hidden, tokens) = dims;
    let (tv, tb) = view_2d("table", tl, vocab, hidden, elem);
    let table = Tensor::random(rng, tv, tb, -2.0, 2.0);
    let (ov, ob) = view_2d("out", ol, tokens, hidden, elem);
    let out = Tensor::new(ov, ob, vec![0.0; (tokens * hidden) as usize]);
    (table, out)
}

fn cpu_forward<T: Real>(ids: &[u32], table: &Tensor, out: &Tensor) -> Vec<f64> {
    let ts = table.host::<T>();
    let mut os = out.host::<T>();
    embedding_forward_cpu(ids, &table.arg(&ts), &mut out.arg_mut(&mut os)).unwrap();
    out.read_host(&os)
}

fn cpu_backward<T: Real>(
    ids: &[u32],
    dout: &Tensor,
    dtable: &Tensor,
    accumulate: bool,
) -> Vec<f64> {
    let ds = dout.host::<T>();
    let mut ts = dtable.host::<T>();
    embedding_backward_cpu(
        ids,
        &dout.arg(&ds),
        &mut dtable.arg_mut(&mut ts),
        accumulate,
    )
    .unwrap();
    dtable.read_host(&ts)
}

#[test]
fn forward_and_backward_match_their_definitions_on_the_cpu() {
    let mut rng = Rng::new(1);
    let (v, h) = (VOCAB as usize, HIDDEN as usize);
    for (tl, ol) in layout_pairs() {
        let (table, out) = tensors(&mut rng, tl, ol, (VOCAB, HIDDEN, TOKENS), ElemType::F32);
        let ids = ids(&mut rng, TOKENS, VOCAB);
        let got = cpu_forward::<f64>(&ids, &table, &out);
        let want: Vec<f64> = ids
            .iter()
            .flat_map(|&id| table.values[id as usize * h..(id as usize + 1) * h].to_vec())
            .collect();
        assert_close(&format!("{tl:?} → {ol:?}"), &got, &want, 0.0);

        let dout = Tensor::random(&mut rng, out.view.clone(), out.bind.clone(), -1.0, 1.0);
        let mut want = vec![0.0; v * h];
        for (t, &id) in ids.iter().enumerate() {
            for k in 0..h {
                want[id as usize * h + k] += dout.values[t * h + k];
            }
        }
        let got = cpu_backward::<f64>(&ids, &dout, &table, false);
        assert_close(&format!("d {tl:?} → {ol:?}"), &got, &want, 1e-15);
        // Accumulating adds to the rows in use and leaves the others alone.
        let used: Vec<bool> = (0..VOCAB).map(|r| ids.contains(&r)).collect();
        let acc: Vec<f64> = (0..v * h)
            .map(|i| table.values[i] + if used[i / h] { want[i] } else { 0.0 })
            .collect();
        let got = cpu_backward::<f64>(&ids, &dout, &table, true);
        assert_close(&format!("accumulated d {tl:?} → {ol:?}"), &got, &acc, 1e-15);
    }
}

#[test]
fn backward_matches_finite_differences_in_f64() {
    let mut rng = Rng::new(2);
    for (tl, ol) in [
        (Layout2::RowMajor, Layout2::RTile(4)),
        (Layout2::RTileT(4), Layout2::ColMajor),
    ] {
        let (table, out) = tensors(&mut rng, tl, ol, (7, 12, 10), ElemType::F32);
        let ids = ids(&mut rng, 10, 7);
        let dout = Tensor::random(&mut rng, out.view.clone(), out.bind.clone(), -1.0, 1.0);
        let got = cpu_backward::<f64>(&ids, &dout, &table, false);
        // d/d table of L(table) = Σ dout ⊙ lookup(table), linear: a wide step loses nothing.
        let want = finite_differences(&table.values, 1e-2, |v| {
            let o = cpu_forward::<f64>(&ids, &table.with_values(v.to_vec()), &out);
            o.iter().zip(&dout.values).map(|(a, b)| a * b).sum()
        });
        assert_close(&format!("{tl:?} → {ol:?}"), &got, &want, 1e-9);
    }
}

/// Forward, and backward overwriting and accumulating, on the GPU against the CPU.
fn check_gpu(gpu: &Gpu, what: &str, table: &Tensor, out: &Tensor, ids: &[u32], rng: &mut Rng) {
    let elem = table.elem();
    let op = EmbeddingOp::new(gpu, &table.view, &out.view).unwrap();
    let vocab = table.dims()[0] as u32;
    let tokens = TokenIds::new(gpu, ids, vocab).unwrap();
    let dout = Tensor::random(rng, out.view.clone(), out.bind.clone(), -1.0, 1.0);
    let (tb, ob, db) = (table.upload(gpu), out.poisoned(gpu), dout.upload(gpu));
    let (fresh, acc) = (table.poisoned(gpu), table.upload(gpu));
    let mut batch = gpu.batch();
    op.forward(
        &mut batch,
        &tokens.ids().unwrap(),
        &table.gpu_arg(&tb),
        &out.gpu_arg(&ob),
    )
    .unwrap();
    op.backward(
        &mut batch,
        &tokens,
        &dout.gpu_arg(&db),
        &table.gpu_arg(&fresh),
        false,
    )
    .unwrap();
    op.backward(
        &mut batch,
        &tokens,
        &dout.gpu_arg(&db),
        &table.gpu_arg(&acc),
        true,
    )
    .unwrap();
    batch.submit().unwrap();
    let (want_out, want_d, want_acc) = match elem {
        ElemType::F16 => (
            cpu_forward::<half::f16>(ids, table, out),
            cpu_backward::<half::f16>(ids, &dout, table, false),
            cpu_backward::<half::f16>(ids, &dout, table, true),
        ),
        _ => (
            cpu_forward::<f32>(ids, table, out),
            cpu_backward::<f32>(ids, &dout, table, false),
            cpu_backward::<f32>(ids, &dout, table, true),
        ),
    };
    assert_close(&format!("{what}: out"), &out.download(&ob), &want_out, 0.0);
    let tol = tolerance(elem, ids.len());
    assert_close(
        &format!("{what}: dtable"),
        &table.download(&fresh),
        &want_d,
        tol,
    );
    assert_close(
        &format!("{what}: accumulated"),
        &table.download(&acc),
        &want_acc,
        tol,
    );
}

#[test]
fn gpu_matches_cpu_under_every_layout_and_element_type() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    for elem in gpu_elems() {
        for (tl, ol) in layout_pairs() {
            let (table, out) = tensors(&mut rng, tl, ol, (VOCAB, HIDDEN, TOKENS), elem);
            let ids = ids(&mut rng, TOKENS, VOCAB);
            check_gpu(
                gpu,
                &format!("{elem} {tl:?} → {ol:?}"),
                &table,
                &out,
                &ids,
                &mut rng,
            );
        }
    }
}

#[test]
fn transformer_widths_and_a_token_repeated_many_times() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    for (hidden, layout) in [
        (384, Layout2::RowMajor),
        (768, Layout2::RTile(8)),
        (30, Layout2::RowMajor),
    ] {
        let (table, out) = tensors(&mut rng, layout, layout, (1000, hidden, 300), ElemType::F32);
        let mut ids = ids(&mut rng, 300, 1000);
        ids[100..250].fill(7);
        check_gpu(
            gpu,
            &format!("hidden {hidden} {layout:?}"),
            &table,
            &out,
            &ids,
            &mut rng,
        );
    }
}

#[test]
fn the_gradient_is_the_same_bits_on_every_run() {
    let gpu = gpu();
    let mut rng = Rng::new(5);
    let (table, out) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        (50, 64, 2000),
        ElemType::F32,
    );
    let ids: Vec<u32> = (0..2000).map(|_| rng.below(3) as u32).collect();
    let op = EmbeddingOp::new(gpu, &table.view, &out.view).unwrap();
    let tokens = TokenIds::new(gpu, &ids, 50).unwrap();
    assert_eq!(tokens.used(), 3);
    let dout = Tensor::random(&mut rng, out.view.clone(), out.bind.clone(), -1.0, 1.0);
    let db = dout.upload(gpu);
    let runs: Vec<Vec<f32>> = (0..3)
        .map(|_| {
            let d = table.poisoned(gpu);
            let mut batch = gpu.batch();
            op.backward(
                &mut batch,
                &tokens,
                &dout.gpu_arg(&db),
                &table.gpu_arg(&d),
                false,
            )
            .unwrap();
            batch.submit().unwrap();
            d.read_back::<f32>().unwrap()
        })
        .collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&runs[0]), bits(&runs[1]));
    assert_eq!(bits(&runs[0]), bits(&runs[2]));
}

/// Work recorded once over a batch of ids reads every later batch refilled into the same
/// buffers: the lookup and the overwriting gradient, with more, fewer and as many ids in use
/// as the batch they were recorded with (the GPU step records them at its first step).
#[test]
fn work_recorded_once_reads_every_refill() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let (vocab, tokens) = (300, 97);
    let (table, out) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        (vocab, HIDDEN, tokens),
        ElemType::F32,
    );
    let batches: Vec<Vec<u32>> = vec![
        ids(&mut rng, tokens, vocab),
        vec![5; tokens as usize],
        (0..tokens).map(|t| vocab - 1 - 3 * t).collect(),
        ids(&mut rng, tokens, vocab),
    ];
    let op = EmbeddingOp::new(gpu, &table.view, &out.view).unwrap();
    let mut token_ids = TokenIds::new(gpu, &batches[0], vocab).unwrap();
    let dout = Tensor::random(&mut rng, out.view.clone(), out.bind.clone(), -1.0, 1.0);
    let (tb, ob, db, dt) = (
        table.upload(gpu),
        out.poisoned(gpu),
        dout.upload(gpu),
        table.poisoned(gpu),
    );
    let mut batch = gpu.batch();
    let ids_arg = token_ids.ids().unwrap();
    op.forward(&mut batch, &ids_arg, &table.gpu_arg(&tb), &out.gpu_arg(&ob))
        .unwrap();
    op.backward(
        &mut batch,
        &token_ids,
        &dout.gpu_arg(&db),
        &table.gpu_arg(&dt),
        false,
    )
    .unwrap();
    let mut recording = batch.finish().unwrap();
    for (k, batch_ids) in batches.iter().enumerate() {
        if k > 0 {
            token_ids.refill(batch_ids).unwrap();
        }
        recording.submit().unwrap();
        let what = format!("batch {k} ({} ids in use)", token_ids.used());
        assert_close(
            &format!("{what}: out"),
            &out.download(&ob),
            &cpu_forward::<f32>(batch_ids, &table, &out),
            0.0,
        );
        assert_close(
            &format!("{what}: dtable"),
            &table.download(&dt),
            &cpu_backward::<f32>(batch_ids, &dout, &table, false),
            tolerance(ElemType::F32, batch_ids.len()),
        );
    }
    // A refill that fails (an id past the vocabulary) leaves the last batch in place.
    let mut bad = batches[3].clone();
    bad[10] = vocab;
    assert!(matches!(
        token_ids.refill(&bad),
        Err(OpError::OutOfRange { .. })
    ));
    recording.submit().unwrap();
    assert_close(
        "after a refused refill: dtable",
        &table.download(&dt),
        &cpu_backward::<f32>(&batches[3], &dout, &table, false),
        tolerance(ElemType::F32, tokens as usize),
    );
}

#[test]
fn an_id_out_of_range_is_an_error_on_the_host_and_nan_on_the_gpu() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let (table, out) = tensors(
        &mut rng,
        Layout2::RTile(4),
        Layout2::RowMajor,
        (VOCAB, HIDDEN, TOKENS),
        ElemType::F32,
    );
    let mut bad = ids(&mut rng, TOKENS, VOCAB);
    bad[11] = VOCAB + 5;
    let err = TokenIds::new(gpu, &bad, VOCAB).unwrap_err();
    assert!(
        matches!(
            err,
            OpError::OutOfRange {
                role: "ids",
                position: 11,
                value: 42,
                limit: 37,
                ..
            }
        ),
        "{err}"
    );
    let ts = table.host::<f32>();
    let mut os = out.host::<f32>();
    let err = embedding_forward_cpu(&bad, &table.arg(&ts), &mut out.arg_mut(&mut os)).unwrap_err();
    assert!(matches!(err, OpError::OutOfRange { .. }), "{err}");
    let err = TokenIds::new(gpu, &[], VOCAB).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");

    // Ids made on the GPU are not checked on the host: the bad token's row is NaN.
    let op = EmbeddingOp::new(gpu, &table.view, &out.view).unwrap();
    let idb = GpuBuffer::from_slice(gpu, &bad).unwrap();
    let id_arg = GpuArg::new(&idb, op.ids_view(), &[("tokens", TOKENS)]).unwrap();
    let (tb, ob) = (table.upload(gpu), out.poisoned(gpu));
    let mut batch = gpu.batch();
    op.forward(&mut batch, &id_arg, &table.gpu_arg(&tb), &out.gpu_arg(&ob))
        .unwrap();
    batch.submit().unwrap();
    let got = out.download(&ob);
    let mut good = bad.clone();
    good[11] = 0;
    let want = cpu_forward::<f32>(&good, &table, &out);
    let h = HIDDEN as usize;
    for (t, (g, w)) in got.chunks(h).zip(want.chunks(h)).enumerate() {
        if t == 11 {
            assert!(g.iter().all(|v| v.is_nan()), "token {t}");
        } else {
            assert_eq!(g, w, "token {t}");
        }
    }
}

#[test]
fn bad_shapes_and_element_types_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(7);
    let (table, out) = tensors(
        &mut rng,
        Layout2::RowMajor,
        Layout2::RowMajor,
        (VOCAB, HIDDEN, TOKENS),
        ElemType::F32,
    );
    let (narrow, _) = view_2d("out", Layout2::RowMajor, TOKENS, HIDDEN - 4, ElemType::F32);
    let err = EmbeddingOp::new(gpu, &table.view, &narrow).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let vector = support::view_1d("v", "hidden", HIDDEN, ElemType::F32);
    let err = EmbeddingOp::new(gpu, &vector, &out.view).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let (ints, _) = view_2d("table", Layout2::RowMajor, VOCAB, HIDDEN, ElemType::I32);
    let err = EmbeddingOp::new(gpu, &ints, &out.view).unwrap_err();
    assert!(
        matches!(err, OpError::Unsupported { role: "table", .. }),
        "{err}"
    );

    let op = EmbeddingOp::new(gpu, &table.view, &out.view).unwrap();
    let ids = ids(&mut rng, TOKENS, VOCAB);
    let (tb, ob) = (table.upload(gpu), out.poisoned(gpu));
    let mut batch = gpu.batch();
    // Ids for another vocabulary, and for another number of tokens.
    let other = TokenIds::new(gpu, &ids, VOCAB + 1).unwrap();
    let err = op
        .backward(
            &mut batch,
            &other,
            &out.gpu_arg(&ob),
            &table.gpu_arg(&tb),
            false,
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let fewer = TokenIds::new(gpu, &ids[1..], VOCAB).unwrap();
    let err = op
        .forward(
            &mut batch,
            &fewer.ids().unwrap(),
            &table.gpu_arg(&tb),
            &out.gpu_arg(&ob),
        )
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // The output passed where the table belongs.
    let tokens = TokenIds::new(gpu, &ids, VOCAB).unwrap();
    let (tv, _) = view_2d("table", Layout2::ColMajor, VOCAB, HIDDEN, ElemType::F32);
    let cm = Tensor::random(&mut rng, tv, table.bind.clone(), -1.0, 1.0);
    let cmb = cm.upload(gpu);
    let err = op
        .forward(
            &mut batch,
            &tokens.ids().unwrap(),
            &cm.gpu_arg(&cmb),
            &out.gpu_arg(&ob),
        )
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { role: "table", .. }),
        "{err}"
    );
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}
