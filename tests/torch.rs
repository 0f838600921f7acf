//! The libtorch engine (feature `torch`): DRUNet on libtorch against deepinv 0.5.0's outputs, and
//! TorchScript denoisers (our small scripted modules and a traced deepinv DRUNet) against values
//! computed here. Run with `cargo test --features torch --test torch` after scripts/setup-torch.sh.
#![cfg(feature = "torch")]

use std::path::{Path, PathBuf};

use tessera::Tensor;
use tessera::denoise::Denoiser;
use tessera::io::read_npy;
use tessera::nn::StateDict;
use tessera::nn::torch::{DrunetArch, TorchDevice, TorchDrunet, TorchScriptDenoiser, build_drunet};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// deepinv's DRUNet.forward(x, σ = 0.1) with the fixture's seeded weights, run on libtorch.
fn drunet_parity(name: &str, expected: DrunetArch) -> f32 {
    // deepinv's own checkpoint format (torch.save), read by tessera's native loader.
    let weights = StateDict::load(&fixture(&format!("deepinv/{name}.pth"))).unwrap();
    let arch = DrunetArch::from_weights(&weights).unwrap();
    assert_eq!(arch, expected, "architecture read off {name}'s weights");
    let net = build_drunet(&arch, weights, TorchDevice::Cpu).unwrap();
    let x = read_npy(&fixture(&format!("deepinv/{name}_x.npy"))).unwrap();
    let y_ref = read_npy(&fixture(&format!("deepinv/{name}_y.npy"))).unwrap();
    let y = net.denoise(&x, 0.1).unwrap();
    assert_eq!(y.shape(), y_ref.shape());
    let err = y.max_abs_diff(&y_ref);
    println!("{name}: max |tessera - deepinv| = {err:.2e}");
    err
}

#[test]
fn drunet_2d_color_matches_deepinv() {
    let arch = DrunetArch {
        in_channels: 3,
        out_channels: 3,
        nc: [16, 32, 64, 128],
        nb: 2,
        dim: 2,
    };
    assert!(drunet_parity("drunet2d_color", arch) <= 1e-4);
}

#[test]
fn drunet_2d_gray_matches_deepinv() {
    let arch = DrunetArch {
        in_channels: 1,
        out_channels: 1,
        nc: [8, 16, 32, 64],
        nb: 1,
        dim: 2,
    };
    assert!(drunet_parity("drunet2d_gray", arch) <= 1e-4);
}

/// 16×24×32 is not a safe size, so this also checks deepinv's replicate-pad-to-16 path.
#[test]
fn drunet_3d_gray_matches_deepinv_through_the_padding_path() {
    let arch = DrunetArch {
        in_channels: 1,
        out_channels: 1,
        nc: [8, 16, 32, 64],
        nb: 1,
        dim: 3,
    };
    assert!(drunet_parity("drunet3d_gray", arch) <= 1e-4);
}

/// Sizes deepinv pads (small) or splits into four windows (large, 2-D): the output keeps the input's
/// shape and a batch of two gives what its items give one by one (batch items are independent).
#[test]
fn drunet_runs_odd_sizes_and_batches_like_single_items() {
    let weights = StateDict::load(&fixture("deepinv/drunet2d_gray.safetensors")).unwrap();
    let arch = DrunetArch::from_weights(&weights).unwrap();
    let net = TorchDrunet::new(&arch, weights, TorchDevice::Cpu).unwrap();
    for shape in [[2usize, 1, 37, 50], [2, 1, 130, 70]] {
        let x = Tensor::from_fn(&shape, |i| ((i * 7919) % 1000) as f32 / 1000.0);
        let y = net.denoise(&x, 0.05).unwrap();
        assert_eq!(y.shape(), &shape);
        assert!(y.data().iter().all(|v| v.is_finite()));
        for b in 0..2 {
            let yb = net.denoise(&x.batch_range(b, b + 1), 0.05).unwrap();
            assert!(
                yb.max_abs_diff(&y.batch_range(b, b + 1)) <= 1e-5,
                "{shape:?} item {b}"
            );
        }
    }
}

#[test]
fn drunet_rejects_wrong_channels_and_weights() {
    let weights = StateDict::load(&fixture("deepinv/drunet2d_gray.safetensors")).unwrap();
    let arch = DrunetArch::from_weights(&weights).unwrap();
    // Asking for more blocks than the weights hold names the first missing key.
    let wrong = DrunetArch {
        nb: 2,
        ..arch.clone()
    };
    let e = TorchDrunet::new(&wrong, weights.clone(), TorchDevice::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("m_down1.1.res.0.weight"), "{e}");
    let net = TorchDrunet::new(&arch, weights, TorchDevice::Cpu).unwrap();
    let e = net
        .denoise(&Tensor::zeros(&[1, 3, 32, 32]), 0.1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("channels"), "{e}");
}

// Repeated from tests/fixtures/torch/make_torchscript.py.
const MIX: [[f32; 3]; 3] = [[0.5, -0.25, 1.0], [0.0, 2.0, 0.125], [-1.5, 0.75, 0.25]];
const SIGMA_GAIN: [f32; 3] = [1.0, -2.0, 0.5];

#[test]
fn torchscript_mixer_matches_its_definition() {
    let model = TorchScriptDenoiser::load(&fixture("torch/mixer.pt"), TorchDevice::Cpu).unwrap();
    let (b, c, h, w) = (2, 3, 5, 7);
    let x = Tensor::from_fn(&[b, c, h, w], |i| (i as f32 * 0.37).sin());
    let sigma = 0.3;
    let y = model.denoise(&x, sigma).unwrap();
    let at =
        |bi: usize, ci: usize, hi: usize, wi: usize| x.data()[((bi * c + ci) * h + hi) * w + wi];
    let expected = Tensor::from_fn(&[b, c, h, w], |i| {
        let (wi, hi, ci, bi) = (i % w, i / w % h, i / (w * h) % c, i / (w * h * c));
        let mixed: f32 = (0..c).map(|k| MIX[ci][k] * at(bi, k, hi, w - 1 - wi)).sum();
        mixed + sigma * SIGMA_GAIN[ci] + 0.01 * hi as f32
    });
    assert!(
        y.max_abs_diff(&expected) <= 1e-5,
        "{}",
        y.max_abs_diff(&expected)
    );
    assert!(model.name().contains("mixer.pt"));
}

#[test]
fn torchscript_sigma_falls_back_to_per_item_and_float_forms() {
    let x = Tensor::from_fn(&[2, 1, 3, 4], |i| i as f32);
    let per_item =
        TorchScriptDenoiser::load(&fixture("torch/per_item.pt"), TorchDevice::Cpu).unwrap();
    // Twice: the second call uses the remembered form.
    for _ in 0..2 {
        let y = per_item.denoise(&x, 0.5).unwrap();
        assert_eq!(y.data(), x.scaled(0.5).data());
    }
    let float =
        TorchScriptDenoiser::load(&fixture("torch/float_sigma.pt"), TorchDevice::Cpu).unwrap();
    let y = float.denoise(&x, 0.25).unwrap();
    assert_eq!(
        y.data(),
        Tensor::from_fn(x.shape(), |i| i as f32 + 0.25).data()
    );
}

/// A deepinv DRUNet traced with torch.jit.trace (tests/fixtures/torch/trace_deepinv_drunet.py), run
/// through TorchScriptDenoiser: the way to bring in any deepinv denoiser.
#[test]
fn traced_deepinv_drunet_matches_deepinv() {
    let model =
        TorchScriptDenoiser::load(&fixture("torch/drunet2d_gray_traced.pt"), TorchDevice::Cpu)
            .unwrap();
    let x = read_npy(&fixture("deepinv/drunet2d_gray_x.npy")).unwrap();
    let y_ref = read_npy(&fixture("deepinv/drunet2d_gray_y.npy")).unwrap();
    let y = model.denoise(&x, 0.1).unwrap();
    let err = y.max_abs_diff(&y_ref);
    println!("traced drunet2d_gray: max |tessera - deepinv| = {err:.2e}");
    assert!(err <= 1e-4);
}

#[test]
fn torchscript_errors_are_clear() {
    let e = TorchScriptDenoiser::load(&fixture("torch/missing.pt"), TorchDevice::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("missing.pt"), "{e}");
    let e = TorchScriptDenoiser::load(&fixture("deepinv/drunet2d_gray_x.npy"), TorchDevice::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("TorchScript"), "{e}");
    // The mixer needs 3 channels: libtorch's exception comes back as an error, not a panic.
    let model = TorchScriptDenoiser::load(&fixture("torch/mixer.pt"), TorchDevice::Cpu).unwrap();
    let e = model
        .denoise(&Tensor::zeros(&[1, 2, 4, 4]), 0.1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("forward"), "{e}");
}

#[test]
fn cuda_is_used_when_present_and_refused_clearly_when_not() {
    if !tch::Cuda::is_available() {
        let e = TorchScriptDenoiser::load(&fixture("torch/mixer.pt"), TorchDevice::Cuda(0))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no CUDA GPU"), "{e}");
        return;
    }
    let weights = StateDict::load(&fixture("deepinv/drunet2d_color.safetensors")).unwrap();
    let arch = DrunetArch::from_weights(&weights).unwrap();
    let net = build_drunet(&arch, weights, TorchDevice::Cuda(0)).unwrap();
    let x = read_npy(&fixture("deepinv/drunet2d_color_x.npy")).unwrap();
    let y_ref = read_npy(&fixture("deepinv/drunet2d_color_y.npy")).unwrap();
    // cuDNN may pick TF32 or other algorithms: a looser bound than on the CPU.
    let err = net.denoise(&x, 0.1).unwrap().max_abs_diff(&y_ref);
    println!("drunet2d_color on cuda:0: max |tessera - deepinv| = {err:.2e}");
    assert!(err <= 1e-3);
}
