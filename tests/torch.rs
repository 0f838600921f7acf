//! The libtorch engine (feature `torch`): DRUNet on libtorch against deepinv 0.5.0's outputs, and
//! TorchScript denoisers (our small scripted modules and a traced deepinv DRUNet) against values
//! computed here. Run with `cargo test --features torch --test torch` after scripts/setup-torch.sh.
#![cfg(feature = "torch")]

use std::path::{Path, PathBuf};

use tessera::Tensor;
use tessera::denoise::Denoiser;
use tessera::io::read_npy;
use tessera::nn::torch::{TorchDevice, TorchDrunet, TorchScriptDenoiser};
use tessera::nn::{DrunetArch, DrunetConfig, Engine, StateDict};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

#[path = "support/drunet_fixtures.rs"]
mod drunet_fixtures;
use drunet_fixtures::arch_of;

/// The grey fixtures' architecture (deepinv: nc = [8, 16, 32, 64], nb = 1).
fn gray_arch(dim: usize) -> DrunetArch {
    arch_of(if dim == 3 {
        "drunet3d_gray"
    } else {
        "drunet2d_gray"
    })
}

/// deepinv's DRUNet.forward(x, σ = 0.1) with the fixture's seeded weights, run on libtorch.
fn drunet_parity(name: &str, arch: DrunetArch) -> f32 {
    // deepinv's own checkpoint format (torch.save), read by tessera's native loader.
    let weights = StateDict::load(&fixture(&format!("deepinv/{name}.pth"))).unwrap();
    let net = TorchDrunet::from_state_dict(arch, weights, false, TorchDevice::Cpu).unwrap();
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
    assert!(drunet_parity("drunet2d_color", arch_of("drunet2d_color")) <= 1e-4);
}

#[test]
fn drunet_2d_gray_matches_deepinv() {
    assert!(drunet_parity("drunet2d_gray", gray_arch(2)) <= 1e-4);
}

/// 16×24×32 is not a safe size, so this also checks deepinv's replicate-pad-to-16 path.
#[test]
fn drunet_3d_gray_matches_deepinv_through_the_padding_path() {
    assert!(drunet_parity("drunet3d_gray", gray_arch(3)) <= 1e-4);
}

/// Sizes deepinv pads (small) or splits into four windows (large, 2-D): the output keeps the input's
/// shape and a batch of two gives what its items give one by one (batch items are independent).
#[test]
fn drunet_runs_odd_sizes_and_batches_like_single_items() {
    let weights = StateDict::load(&fixture("deepinv/drunet2d_gray.safetensors")).unwrap();
    let net = TorchDrunet::from_state_dict(gray_arch(2), weights, false, TorchDevice::Cpu).unwrap();
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
    // Asking for more blocks than the weights hold names the first missing key.
    let wrong = DrunetArch {
        nb: 2,
        ..gray_arch(2)
    };
    let e = TorchDrunet::from_state_dict(wrong, weights.clone(), false, TorchDevice::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("m_down1.1.res.0.weight"), "{e}");
    let net = TorchDrunet::from_state_dict(gray_arch(2), weights, false, TorchDevice::Cpu).unwrap();
    // A 2-D network built with a fixed architecture does not take volumes.
    let e = net
        .denoise(&Tensor::zeros(&[1, 1, 8, 32, 32]), 0.1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2-D"), "{e}");
    let e = net
        .denoise(&Tensor::zeros(&[1, 3, 32, 32]), 0.1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("channels"), "{e}");
}

/// A preset's `[denoiser] kind = "drunet"`, `engine = "torch"` builds the libtorch network, which
/// agrees with the native engine; with no `dim`, the 2-D network also denoises volumes (inflated
/// kernels), and a volume of equal slices then gives the 2-D output in every slice.
#[test]
fn preset_config_with_engine_torch_matches_the_native_engine() {
    let dir = fixture("deepinv");
    let cfg = |engine| DrunetConfig {
        weights: Some("drunet2d_gray.pth".into()),
        in_channels: 1,
        out_channels: 1,
        nc: vec![8, 16, 32, 64],
        nb: 1,
        engine,
        ..DrunetConfig::default()
    };
    let torch = cfg(Engine::Torch).build(&dir).unwrap();
    let native = cfg(Engine::Native).build(&dir).unwrap();
    assert!(torch.name().contains("libtorch"), "{}", torch.name());
    let x = read_npy(&fixture("deepinv/drunet2d_gray_x.npy")).unwrap();
    let (yt, yn) = (
        torch.denoise(&x, 0.1).unwrap(),
        native.denoise(&x, 0.1).unwrap(),
    );
    assert!(yt.max_abs_diff(&yn) <= 1e-4, "{}", yt.max_abs_diff(&yn));

    let (h, w) = (x.shape()[2], x.shape()[3]);
    let depth = 4;
    let vol = Tensor::from_fn(&[1, 1, depth, h, w], |i| x.data()[i % (h * w)]);
    let yv = torch.denoise(&vol, 0.1).unwrap();
    let yn3 = native.denoise(&vol, 0.1).unwrap();
    assert!(yv.max_abs_diff(&yn3) <= 1e-4, "{}", yv.max_abs_diff(&yn3));
    // Interior slices see equal neighbours on both sides: the 2-D result.
    let slice = |t: &Tensor, z: usize| {
        Tensor::from_vec(&[1, 1, h, w], t.data()[z * h * w..(z + 1) * h * w].to_vec()).unwrap()
    };
    assert!(slice(&yv, 1).max_abs_diff(&yt) <= 1e-4);
}

/// Without `weights` the torch engine builds seeded random weights (for timing), says so in its name,
/// and the same seed gives the same network.
#[test]
fn preset_config_without_weights_builds_a_seeded_random_network() {
    let cfg = DrunetConfig {
        in_channels: 1,
        out_channels: 1,
        nc: vec![4, 8, 8, 16],
        nb: 1,
        engine: Engine::Torch,
        seed: 3,
        ..DrunetConfig::default()
    };
    let (a, b) = (
        cfg.build(Path::new(".")).unwrap(),
        cfg.build(Path::new(".")).unwrap(),
    );
    assert!(a.name().contains("RANDOM"), "{}", a.name());
    let x = Tensor::from_fn(&[1, 1, 40, 24], |i| (i % 13) as f32 / 13.0);
    let (ya, yb) = (a.denoise(&x, 0.1).unwrap(), b.denoise(&x, 0.1).unwrap());
    assert_eq!(ya.shape(), x.shape());
    assert_eq!(ya.data(), yb.data());
    assert!(ya.norm() > 0.0);
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
    let arch = DrunetArch {
        in_channels: 3,
        out_channels: 3,
        nc: [16, 32, 64, 128],
        nb: 2,
        dim: 2,
    };
    let net = TorchDrunet::from_state_dict(arch, weights, false, TorchDevice::Cuda(0)).unwrap();
    let x = read_npy(&fixture("deepinv/drunet2d_color_x.npy")).unwrap();
    let y_ref = read_npy(&fixture("deepinv/drunet2d_color_y.npy")).unwrap();
    // cuDNN may pick TF32 or other algorithms: a looser bound than on the CPU.
    let err = net.denoise(&x, 0.1).unwrap().max_abs_diff(&y_ref);
    println!("drunet2d_color on cuda:0: max |tessera - deepinv| = {err:.2e}");
    assert!(err <= 1e-3);
}
