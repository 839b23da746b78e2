//! Calibration: its cache (rebuilt whenever it does not check out) and a run on the adapter.

use std::cell::Cell;
use std::fs;
use std::path::PathBuf;

use fblayout_kernels::Gpu;
use fblayout_kernels::runtime::DiskCache;
use fblayout_plan::calibrate::{
    CalibrationError, VERSION, cache_key, cache_path, decode, encode, load_or_measure,
};
use fblayout_plan::graph::Sizes;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::select::{
    CALIBRATION, CalibrationShape, Class, CostModel, Factors, KernelFactors, KernelKind,
    OperandKind, Origin, Strategy, plan,
};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fblayout-calibration-{name}-{}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Factors unlike the reference device's, standing for a measurement.
fn measured() -> Factors {
    let mut f = Factors::reference(Precision::F32);
    f.bandwidth = 12.5e9;
    f.access.tiled4 = 1.5;
    f.access.strided = 7.25;
    f.reduce.tiled4 = 2.5;
    f.dispatch = 3e-5;
    f.matmul
        .rates
        .push((Class::Contiguous, Class::Strided, 1.5e10));
    f.kernels.multipliers = vec![
        (
            KernelKind::Norm,
            OperandKind::Activation,
            LayoutChoice::RTile(8),
            3.75,
        ),
        (
            KernelKind::Linear,
            OperandKind::Weight,
            LayoutChoice::ColMajor,
            0.625,
        ),
    ];
    f
}

fn cache_note(model: &CostModel) -> String {
    match model.origin() {
        Origin::Calibrated { cache, .. } => cache.clone(),
        other => panic!("expected a calibrated model, got {other:?}"),
    }
}

/// Loads through `cache`, counting the measurements made.
fn load(cache: &DiskCache, measurements: &Cell<usize>) -> CostModel {
    load_or_measure(Some(cache), "test adapter", || {
        measurements.set(measurements.get() + 1);
        Ok(measured())
    })
    .unwrap()
}

#[test]
fn factors_round_trip_through_the_cache_text() {
    let f = measured();
    assert_eq!(decode(encode(&f).as_bytes()).unwrap(), f);
    for precision in [Precision::F32, Precision::Mixed] {
        let reference = Factors::reference(precision);
        assert_eq!(decode(encode(&reference).as_bytes()).unwrap(), reference);
    }
    let bad = encode(&f).replace("bandwidth 12500000000", "bandwidth -1");
    assert!(decode(bad.as_bytes()).unwrap_err().contains("bandwidth"));
    let missing: String = encode(&f)
        .lines()
        .filter(|l| !l.starts_with("reduce"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(decode(missing.as_bytes()).unwrap_err().contains("reduce"));
    let negative = encode(&f).replace(
        "kernel norm activation rt8 3.75",
        "kernel norm activation rt8 -3.75",
    );
    assert!(decode(negative.as_bytes()).unwrap_err().contains("norm"));
    let unknown = encode(&f).replace("kernel norm activation", "kernel norms activation");
    assert!(decode(unknown.as_bytes()).unwrap_err().contains("norms"));
    assert!(
        decode(b"bandwidth 1e9\nlatency 3\n")
            .unwrap_err()
            .contains("unexpected")
    );
}

#[test]
fn a_cache_is_measured_once_then_read() {
    let dir = temp_dir("once");
    let cache = DiskCache::at(dir.join("calibration-a.bin"), "adapter A".into());
    let n = Cell::new(0);
    let first = load(&cache, &n);
    assert_eq!(n.get(), 1);
    assert!(
        cache_note(&first).contains("no cache file yet"),
        "{}",
        cache_note(&first)
    );
    let second = load(&cache, &n);
    assert_eq!(n.get(), 1, "the second load reads the file");
    assert_eq!(cache_note(&second), "read from the cache");
    assert_eq!(second.factors(), &measured());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_cache_is_rebuilt_not_trusted() {
    let dir = temp_dir("corrupt");
    let cache = DiskCache::at(dir.join("calibration-a.bin"), "adapter A".into());
    let n = Cell::new(0);
    load(&cache, &n);
    let good = fs::read(cache.path()).unwrap();
    for (what, bytes) in [
        ("flipped", {
            let mut b = good.clone();
            let last = b.len() - 2;
            b[last] ^= 0x20;
            b
        }),
        ("truncated", good[..good.len() - 5].to_vec()),
        ("garbage", b"not a cache at all".to_vec()),
    ] {
        fs::write(cache.path(), &bytes).unwrap();
        let before = n.get();
        let model = load(&cache, &n);
        assert_eq!(n.get(), before + 1, "{what}: measured again");
        assert!(
            cache_note(&model).contains("rebuilt"),
            "{what}: {}",
            cache_note(&model)
        );
        assert_eq!(model.factors(), &measured());
        // The file was rewritten whole: the next load reads it.
        assert_eq!(
            cache_note(&load(&cache, &n)),
            "read from the cache",
            "{what}"
        );
    }
    // A valid envelope around factors that don't check out is rebuilt too.
    let bad = encode(&measured()).replace("access 1.5 ", "access 0 ");
    cache.save(bad.as_bytes()).unwrap();
    let model = load(&cache, &n);
    assert!(
        cache_note(&model).contains("not a positive number"),
        "{}",
        cache_note(&model)
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_cache_of_another_version_or_adapter_is_rebuilt() {
    let dir = temp_dir("stale");
    let path = dir.join("calibration-a.bin");
    let n = Cell::new(0);
    load(
        &DiskCache::at(path.clone(), format!("v{VERSION}|adapter A|driver 1")),
        &n,
    );
    for other in [
        format!("v{}|adapter A|driver 1", VERSION + 1),
        format!("v{VERSION}|adapter B|driver 1"),
        format!("v{VERSION}|adapter A|driver 2"),
    ] {
        let before = n.get();
        let model = load(&DiskCache::at(path.clone(), other.clone()), &n);
        assert_eq!(n.get(), before + 1, "{other}: measured again");
        assert!(
            cache_note(&model).contains("another adapter, driver or version"),
            "{other}: {}",
            cache_note(&model)
        );
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_measurement_writes_no_cache() {
    let dir = temp_dir("failed");
    let cache = DiskCache::at(dir.join("calibration-a.bin"), "adapter A".into());
    let err = load_or_measure(Some(&cache), "test adapter", || {
        Err(CalibrationError::Measure {
            step: "test".into(),
            detail: "the kernel failed".into(),
        })
    })
    .unwrap_err();
    assert!(err.to_string().contains("the kernel failed"), "{err}");
    assert!(!cache.path().exists());
    let _ = fs::remove_dir_all(&dir);
}

/// Runs on the adapter wgpu finds (lavapipe here); fails, never skips, without one.
#[test]
fn calibration_runs_on_the_adapter_and_is_cached() {
    let gpu = Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU for calibration; install Mesa's Vulkan drivers \
             (`apt-get install mesa-vulkan-drivers`, which includes lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    });
    let info = gpu.info();
    let key = cache_key(info, &CALIBRATION);
    assert!(key.contains(&format!("v{VERSION}")));
    assert!(key.contains(&info.driver));
    assert!(key.contains(&CALIBRATION.name()));
    // Another shape is another file and another key.
    let other = CalibrationShape::new(
        CALIBRATION.config,
        Sizes { batch: 1, seq: 64 },
        Precision::Mixed,
    );
    assert_ne!(cache_key(info, &other), key);
    let somewhere = std::path::Path::new("cache");
    assert_ne!(
        cache_path(somewhere, info, &other),
        cache_path(somewhere, info, &CALIBRATION)
    );
    let dir = temp_dir("gpu");
    let start = std::time::Instant::now();
    let model = CostModel::calibrated(&gpu, Some(&dir)).unwrap();
    eprintln!("calibrated on {info} in {:.2?}:\n{model}", start.elapsed());
    assert!(
        cache_note(&model).contains("measured"),
        "{}",
        cache_note(&model)
    );
    assert!(cache_path(&dir, info, &CALIBRATION).exists());
    let f = model.factors();
    // Every class was measured (a software adapter may read strided as fast as contiguous,
    // so only the definitions are checked): the products cover both classes of the left
    // operand against all four of the right one.
    for a in [Class::Contiguous, Class::Strided] {
        for b in Class::ALL {
            assert!(
                f.matmul.rates.iter().any(|r| (r.0, r.1) == (a, b)),
                "{a}·{b}: {model}"
            );
        }
    }
    assert!(f.bandwidth > 0.0 && f.dispatch >= 0.0, "{model}");
    // Every kind of operation has a multiplier under every candidate layout of a matrix.
    for kind in KernelKind::ALL {
        for layout in LayoutChoice::candidates(2) {
            assert!(
                f.kernels
                    .multipliers
                    .iter()
                    .any(|m| (m.0, m.2) == (kind, layout) && m.3 > 0.0),
                "{kind} under {layout}: {model}"
            );
        }
    }
    let again = CostModel::calibrated(&gpu, Some(&dir)).unwrap();
    assert_eq!(cache_note(&again), "read from the cache");
    assert_eq!(again.factors(), model.factors());
    // The calibrated model plans the shipped graphs: guided never worse than row-major.
    let g = build(Model::Encoder, ModelConfig::MINI.with_layers(2)).unwrap();
    let sizes = Sizes {
        batch: 32,
        seq: 128,
    };
    let rm = plan(&g, sizes, &model, Strategy::RowMajor).unwrap();
    let guided = plan(&g, sizes, &model, Strategy::Guided).unwrap();
    eprintln!(
        "row-major {:.3} ms, guided {:.3} ms",
        rm.cost() * 1e3,
        guided.cost() * 1e3
    );
    assert!(guided.cost() <= rm.cost());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_kernel_multiplier_falls_back_to_the_other_operand_then_to_one() {
    let f = measured().kernels;
    let (rt8, cm) = (LayoutChoice::RTile(8), LayoutChoice::ColMajor);
    assert_eq!(f.of(KernelKind::Norm, OperandKind::Activation, rt8), 3.75);
    // No weight multiplier for the norm under R-Tile 8: the activations'.
    assert_eq!(f.of(KernelKind::Norm, OperandKind::Weight, rt8), 3.75);
    assert_eq!(f.of(KernelKind::Linear, OperandKind::Activation, cm), 0.625);
    // Nothing for the kind and layout: the analytic term as it is.
    assert_eq!(f.of(KernelKind::Norm, OperandKind::Activation, cm), 1.0);
    assert_eq!(
        KernelFactors::default().of(KernelKind::Attention, OperandKind::Weight, rt8),
        1.0
    );
}
