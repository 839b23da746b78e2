//! `fblayout_hf::embed` on bad input: every mismatch of the hidden state and the mask is an
//! error naming its cause, never a panic; and what it computes by the definitions (the mean
//! over the real positions, unit length).

use fblayout_hf::ModelDir;
use fblayout_hf::embed::{EmbedError, embeddings, last_hidden_state, mean_pool, normalize};

use crate::common::model_dir;

#[test]
fn pooling_averages_the_real_positions_only_and_normalising_gives_unit_length() {
    // Two rows of 3 positions, 2 values: padding values that would change any mean.
    let hidden = [1.0, -2.0, 3.0, 4.0, 1e9, 1e9, 5.0, 6.0, -1e9, 7.0, 1e9, 1e9];
    let mask = [vec![1, 1, 0], vec![1, 0, 0]];
    assert_eq!(
        mean_pool(&hidden, &mask, 2).unwrap(),
        [vec![2.0, 1.0], vec![5.0, 6.0]]
    );
    let e = embeddings(&hidden, &mask, 2).unwrap();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!(e.iter().all(|v| (norm(v) - 1.0).abs() < 1e-15));
    assert_eq!(e[0], [2.0 / 5f64.sqrt(), 1.0 / 5f64.sqrt()]);
    // A zero vector stays zero (PyTorch's ε), rather than NaN.
    assert_eq!(normalize(&[0.0, 0.0]), [0.0, 0.0]);
}

#[test]
fn a_hidden_state_and_mask_that_disagree_are_errors_naming_the_cause() {
    let hidden = [0.0; 12];
    let err = mean_pool(&hidden, &[vec![1, 1, 1]], 2).unwrap_err();
    assert!(matches!(err, EmbedError::Shape(_)), "{err}");
    assert!(err.to_string().contains("12 hidden values"), "{err}");
    let err = mean_pool(&hidden, &[vec![1, 1, 1], vec![1, 1]], 2).unwrap_err();
    assert!(
        err.to_string().contains("mask row 1 has 2 positions"),
        "{err}"
    );
    let err = mean_pool(&hidden, &[vec![1, 1, 1], vec![1, 1, 1]], 0).unwrap_err();
    assert!(matches!(err, EmbedError::Shape(_)), "{err}");
    let err = mean_pool(&hidden, &[vec![1, 2, 1], vec![1, 1, 1]], 2).unwrap_err();
    assert_eq!(
        err,
        EmbedError::Mask {
            row: 0,
            position: 1,
            value: 2
        }
    );
    let err = embeddings(&hidden, &[vec![1, 1, 1], vec![0, 0, 0]], 2).unwrap_err();
    assert_eq!(err, EmbedError::Empty(1));
    assert!(err.to_string().contains("row 1"), "{err}");
}

#[test]
fn the_last_hidden_state_is_named_for_bert_and_refused_for_language_models() {
    let bert = ModelDir::open(model_dir("bert")).unwrap();
    let name = last_hidden_state(bert.config()).unwrap();
    let graph = fblayout_hf::graph::build(&bert).unwrap();
    // The tiny BERT has 2 blocks: the second one's output, `[batch, seq, 64]`.
    assert_eq!(name, "l1.out");
    let extents = graph.tensor(graph.find(&name).unwrap()).fixed_extents();
    assert_eq!(extents, [0, 0, 64]);
    let gpt2 = ModelDir::open(model_dir("gpt2")).unwrap();
    let err = last_hidden_state(gpt2.config()).unwrap_err();
    assert!(err.to_string().contains("gpt2"), "{err}");
}
