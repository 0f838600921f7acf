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

fn weights_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/weights")
        .join(name)
}

fn load_err(name: &str) -> String {
    match StateDict::load(&weights_fixture(name)) {
        Ok(sd) => panic!("{name}: expected an error, loaded {} keys", sd.len()),
        Err(e) => e.to_string(),
    }
}

/// Strided views, shared storages, empty and 0-d tensors, parameters, f16/bf16/f64, and the pickle
/// protocols and container formats torch.save writes (see tests/fixtures/weights/make_fixtures.py).
#[test]
fn torch_views_dtypes_and_formats_load_like_torch() {
    let expected = StateDict::load(&weights_fixture("views_expected.safetensors")).unwrap();
    assert_eq!(expected.len(), 14);
    for name in [
        "views.pth",
        "views_p4.pth",
        "views_legacy.pth",
        "views_deflated.pth",
    ] {
        let sd = StateDict::load(&weights_fixture(name)).unwrap();
        assert_same(&sd, &expected);
        assert_eq!(sd.get("v.empty").unwrap().shape(), &[0, 3], "{name}");
        assert_eq!(sd.get("v.scalar").unwrap().data(), &[2.5], "{name}");
        // Independently of the expected file: a transpose and a strided slice of `v.base`.
        let base = sd.get("v.base").unwrap().data();
        let t = sd.get("v.transposed").unwrap();
        assert_eq!(t.shape(), &[4, 3]);
        for i in 0..4 {
            for j in 0..3 {
                assert_eq!(t.data()[i * 3 + j], base[j * 4 + i], "{name}");
            }
        }
        let s = sd.get("v.slice").unwrap();
        assert_eq!(s.shape(), &[2, 2]);
        assert_eq!(s.data(), &[base[4], base[6], base[8], base[10]], "{name}");
        let e = sd.get("v.expanded").unwrap();
        assert_eq!(e.data(), &[1.5, -2.0, 1.5, -2.0, 1.5, -2.0], "{name}");
        let h = sd.get("h.f16").unwrap().data();
        assert_eq!(h[4], 65504.0);
        assert_eq!(h[10], f32::INFINITY);
        assert_eq!(h[1].to_bits(), (-0.0f32).to_bits());
    }
}

#[test]
fn safetensors_half_bfloat_and_double_convert_like_torch() {
    let sd = StateDict::load(&weights_fixture("dtypes.safetensors")).unwrap();
    let expected = StateDict::load(&weights_fixture("dtypes_expected.safetensors")).unwrap();
    assert_same(&sd, &expected);
    // The conversions are lossy in different ways, so the four keys really differ.
    assert_ne!(sd.get("a.f16").unwrap(), sd.get("a.bf16").unwrap());
}

#[test]
fn a_checkpoint_wrapping_one_state_dict_yields_it() {
    let sd = StateDict::load(&weights_fixture("checkpoint.pth")).unwrap();
    assert_same(
        &sd,
        &StateDict::load(&weights_fixture("small.safetensors")).unwrap(),
    );
}

#[test]
fn unusable_files_are_errors_that_say_why() {
    let e = load_err("two_state_dicts.pth");
    assert!(e.contains("`params`") && e.contains("`params_ema`"), "{e}");
    assert!(e.contains("two_state_dicts.pth"), "{e}");
    let e = load_err("batchnorm_int64.pth");
    assert!(
        e.contains("`num_batches_tracked`") && e.contains("int64"),
        "{e}"
    );
    let e = load_err("int64.safetensors");
    assert!(e.contains("`steps`") && e.contains("I64"), "{e}");
    let e = load_err("whole_module.pth");
    assert!(e.contains("torch.nn.modules.linear.Linear"), "{e}");
    let e = load_err("torchscript.pt");
    assert!(e.contains("TorchScript"), "{e}");
    let e = load_err("expand_bomb.pth");
    assert!(e.contains("`w`") && e.contains("expands"), "{e}");
    let e = load_err("make_fixtures.py");
    assert!(e.contains("not a torch.save file"), "{e}");
    let e = StateDict::load(&weights_fixture("absent.pth"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.pth"), "{e}");
}

/// Parses `bytes` and reports a panic as a test failure that names the case.
fn parse_no_panic(what: &str, bytes: &[u8]) -> Result<StateDict, tessera::Error> {
    let path = Path::new(what);
    match std::panic::catch_unwind(|| StateDict::from_bytes(path, bytes)) {
        Ok(r) => r,
        Err(_) => panic!("loader panicked on {what}"),
    }
}

/// Untrusted input: every truncation is an error, and corrupted bytes give an error or a dict, never
/// a panic or a huge allocation.
#[test]
fn truncated_or_corrupted_files_are_errors_not_panics() {
    // (file, offsets tried per region): every offset of the first 4 KiB and the last 600 bytes for
    // one file per container format, a sample elsewhere (a debug-build parse is slow on busy cores).
    let files = [
        (fixture("drunet2d_gray.pth"), 48),
        (fixture("drunet2d_gray.safetensors"), 48),
        (weights_fixture("views.pth"), usize::MAX),
        (weights_fixture("views_p4.pth"), 256),
        (weights_fixture("views_legacy.pth"), usize::MAX),
        (weights_fixture("views_deflated.pth"), 256),
        (weights_fixture("dtypes.safetensors"), usize::MAX),
    ];
    // A fixed LCG so failures reproduce.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |n: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % n.max(1)
    };
    for &(ref file, per_region) in &files {
        let bytes = std::fs::read(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        assert!(parse_no_panic(&name, &bytes).is_ok());
        let n = bytes.len();
        let head = n.min(4096);
        let sample = |rand: &mut dyn FnMut(usize) -> usize, range: std::ops::Range<usize>| {
            if per_region >= range.len() {
                range.collect::<Vec<_>>()
            } else {
                (0..per_region)
                    .map(|_| range.start + rand(range.len()))
                    .collect()
            }
        };
        // Truncations: lengths within the first 4 KiB (headers, pickle) and anywhere.
        let mut lengths = sample(&mut rand, 0..head);
        lengths.extend((0..48).map(|_| rand(n)));
        for len in lengths {
            let r = parse_no_panic(&format!("{name} cut at {len}"), &bytes[..len]);
            assert!(r.is_err(), "{name} truncated to {len} bytes loaded");
        }
        // Corruptions: single bytes set to extreme values across the first 4 KiB (where the
        // zip directory entries, pickle and JSON header live) and at random places, plus the tail
        // (zip central directory).
        let mut positions = sample(&mut rand, 0..head);
        positions.extend(sample(&mut rand, n.saturating_sub(600)..n));
        positions.extend((0..24).map(|_| rand(n)));
        for pos in positions {
            for value in [0xff, bytes[pos] ^ 0x80] {
                let mut corrupt = bytes.clone();
                corrupt[pos] = value;
                let _ = parse_no_panic(&format!("{name} with byte {pos} = {value:#x}"), &corrupt);
            }
        }
    }
}
