//! Weight loading: deepinv's DRUNet state_dicts saved by torch.save (`.pth`) and safetensors load to
//! the same tensors; the key set and shapes match DRUNet's architecture for the manifest's config.

use std::path::{Path, PathBuf};

use tessera::nn::StateDict;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deepinv")
        .join(name)
}

/// The keys deepinv's `DRUNet(in_channels, out_channels, nc, nb, bias=False)` has, with shapes
/// (`models/drunet.py`: head conv, 3 × [nb ResBlocks + strided-conv down], nb body ResBlocks,
/// 3 × [transposed-conv up + nb ResBlocks], tail conv; each ResBlock is two convs `res.0`, `res.2`;
/// all without bias).
fn drunet_keys(
    channels: usize,
    nc: [usize; 4],
    nb: usize,
    dim: usize,
) -> Vec<(String, Vec<usize>)> {
    let k = |c_out: usize, c_in: usize, size: usize| {
        let mut s = vec![c_out, c_in];
        s.extend(std::iter::repeat_n(size, dim));
        s
    };
    let mut keys = vec![("m_head.weight".to_string(), k(nc[0], channels + 1, 3))];
    let res = |prefix: String, c: usize, keys: &mut Vec<(String, Vec<usize>)>| {
        for b in 0..nb {
            for conv in [0, 2] {
                keys.push((format!("{prefix}{b}.res.{conv}.weight"), k(c, c, 3)));
            }
        }
    };
    for level in 0..3 {
        res(format!("m_down{}.", level + 1), nc[level], &mut keys);
        keys.push((
            format!("m_down{}.{nb}.weight", level + 1),
            k(nc[level + 1], nc[level], 2),
        ));
    }
    // deepinv's `sequential` returns a lone module unwrapped, so one body block has no index.
    for b in 0..nb {
        let block = if nb == 1 {
            String::new()
        } else {
            format!("{b}.")
        };
        for conv in [0, 2] {
            keys.push((
                format!("m_body.{block}res.{conv}.weight"),
                k(nc[3], nc[3], 3),
            ));
        }
    }
    for level in (0..3).rev() {
        // ConvTranspose weights are (in, out, k…).
        keys.push((
            format!("m_up{}.0.weight", level + 1),
            k(nc[level + 1], nc[level], 2),
        ));
        let c = nc[level];
        for b in 0..nb {
            for conv in [0, 2] {
                keys.push((
                    format!("m_up{}.{}.res.{conv}.weight", level + 1, b + 1),
                    k(c, c, 3),
                ));
            }
        }
    }
    keys.push(("m_tail.weight".to_string(), k(channels, nc[0], 3)));
    keys
}

/// (fixture stem, channels, nc, nb, dim) as in manifest.json.
const DRUNETS: [(&str, usize, [usize; 4], usize, usize); 3] = [
    ("drunet2d_color", 3, [16, 32, 64, 128], 2, 2),
    ("drunet2d_gray", 1, [8, 16, 32, 64], 1, 2),
    ("drunet3d_gray", 1, [8, 16, 32, 64], 1, 3),
];

fn assert_same(a: &StateDict, b: &StateDict) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (key, ta) in a.iter() {
        let tb = b.get(key).unwrap();
        assert_eq!(ta.shape(), tb.shape(), "{key}");
        let bits = |t: &tessera::Tensor| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(ta) == bits(tb), "{key}: values differ");
    }
}

#[test]
fn drunet_safetensors_have_drunets_keys_and_shapes() {
    for (stem, channels, nc, nb, dim) in DRUNETS {
        let sd = StateDict::load(&fixture(&format!("{stem}.safetensors"))).unwrap();
        let expected = drunet_keys(channels, nc, nb, dim);
        assert_eq!(sd.len(), expected.len(), "{stem}");
        assert_eq!(sd.len(), 8 + 14 * nb, "{stem}");
        let mut sd = sd;
        for (key, shape) in &expected {
            let t = sd.take(key, shape).unwrap();
            // Seeded random weights: never all zero (a loader that drops data would give zeros).
            assert!(t.data().iter().any(|&v| v != 0.0), "{stem} {key}");
            assert!(t.data().iter().all(|v| v.is_finite()), "{stem} {key}");
        }
        sd.finish().unwrap();
    }
}

#[test]
fn save_safetensors_round_trips_bit_exactly() {
    let sd = StateDict::load(&fixture("drunet2d_gray.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.safetensors");
    sd.save_safetensors(&out).unwrap();
    assert_same(&sd, &StateDict::load(&out).unwrap());
}

#[test]
fn drunet_pth_equals_safetensors_bit_for_bit() {
    for (stem, ..) in DRUNETS {
        let pth = StateDict::load(&fixture(&format!("{stem}.pth"))).unwrap();
        let st = StateDict::load(&fixture(&format!("{stem}.safetensors"))).unwrap();
        assert!(!pth.is_empty());
        assert_same(&pth, &st);
    }
}
