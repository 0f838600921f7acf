//! DRUNet and DnCNN on the native engine: parity with deepinv 0.5.0 (fixtures in
//! tests/fixtures/deepinv: seeded random weights, input, `DRUNet.forward(x, 0.1)`), preset configs,
//! and tiling.

use std::path::{Path, PathBuf};

use tessera::denoise::{Denoiser, DenoiserConfig};
use tessera::error::Error;
use tessera::io::npy::read_npy;
use tessera::nn::{DncnnConfig, Drunet, DrunetArch, DrunetConfig, StateDict};
use tessera::tensor::Tensor;
use tessera::tiling::{OverlapTiling, TiledDenoiser};

#[path = "support/drunet_fixtures.rs"]
mod drunet_fixtures;
use drunet_fixtures::{arch_of, cases};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deepinv")
}

#[test]
fn drunet_matches_deepinv_on_every_fixture_and_weights_format() {
    for (name, arch) in cases() {
        let x = read_npy(&fixtures().join(format!("{name}_x.npy"))).unwrap();
        let want = read_npy(&fixtures().join(format!("{name}_y.npy"))).unwrap();
        for ext in WEIGHT_FORMATS {
            let dict = StateDict::load(&fixtures().join(format!("{name}.{ext}"))).unwrap();
            let net = Drunet::from_state_dict(arch.clone(), dict, false).unwrap();
            let got = net.denoise(&x, 0.1).unwrap();
            assert_eq!(got.shape(), want.shape());
            let err = got.max_abs_diff(&want);
            println!("{name}.{ext}: max abs error {err:.2e}");
            assert!(err <= 1e-4, "{name}.{ext}: max abs error {err}");
        }
    }
}

/// Both of the fixtures' weight files: torch.save archives and safetensors.
const WEIGHT_FORMATS: &[&str] = &["pth", "safetensors"];

#[test]
fn wrong_architecture_for_the_weights_names_the_key() {
    let dict = StateDict::load(&fixtures().join("drunet2d_gray.safetensors")).unwrap();
    let arch = DrunetArch {
        in_channels: 1,
        out_channels: 1,
        nc: [8, 16, 32, 64],
        nb: 2,
        dim: 2,
    };
    let e = Drunet::from_state_dict(arch, dict, false)
        .err()
        .unwrap()
        .to_string();
    // nb = 2 expects indexed body blocks; the file has deepinv's unindexed single block.
    assert!(e.contains("m_"), "{e}");
}

#[test]
fn preset_config_resolves_weights_against_the_preset_folder() {
    let text = "[denoiser]\nkind = \"drunet\"\nweights = \"drunet2d_gray.safetensors\"\n\
                in_channels = 1\nout_channels = 1\nnc = [8, 16, 32, 64]\nnb = 1\n";
    #[derive(serde::Deserialize)]
    struct P {
        denoiser: DenoiserConfig,
    }
    let as_written = toml::from_str::<P>(text).unwrap().denoiser;
    let mut cfg = as_written.clone();
    // What `Preset::load` does for a preset in the fixtures folder.
    for p in cfg.paths_mut() {
        *p = fixtures().join(&*p);
    }
    let net = cfg.build().unwrap();
    assert!(net.name().contains("drunet2d_gray"), "{}", net.name());
    let x = read_npy(&fixtures().join("drunet2d_gray_x.npy")).unwrap();
    let want = read_npy(&fixtures().join("drunet2d_gray_y.npy")).unwrap();
    assert!(net.denoise(&x, 0.1).unwrap().max_abs_diff(&want) <= 1e-4);
    // Unresolved, it is looked up in the current folder, not found, and the error names the file.
    let e = as_written.build().err().unwrap().to_string();
    assert!(e.contains("drunet2d_gray.safetensors"), "{e}");
}

#[test]
fn bad_configs_name_their_field() {
    let d = DrunetConfig::default();
    let cases: Vec<(DenoiserConfig, &str)> = vec![
        (
            DenoiserConfig::Drunet(DrunetConfig {
                nc: vec![64, 128, 256],
                ..d.clone()
            }),
            "denoiser.nc",
        ),
        (
            DenoiserConfig::Drunet(DrunetConfig {
                nc: vec![64, 0, 256, 512],
                ..d.clone()
            }),
            "denoiser.nc",
        ),
        (
            DenoiserConfig::Drunet(DrunetConfig { nb: 0, ..d.clone() }),
            "denoiser.nb",
        ),
        (
            DenoiserConfig::Drunet(DrunetConfig {
                in_channels: 0,
                ..d.clone()
            }),
            "denoiser.in_channels",
        ),
        (
            DenoiserConfig::Drunet(DrunetConfig {
                dim: Some(4),
                ..d.clone()
            }),
            "denoiser.dim",
        ),
        (
            DenoiserConfig::Drunet(DrunetConfig {
                inflate_3d: true,
                ..d.clone()
            }),
            "denoiser.inflate_3d",
        ),
        (
            DenoiserConfig::Dncnn(DncnnConfig {
                depth: 1,
                ..Default::default()
            }),
            "denoiser.depth",
        ),
        (
            DenoiserConfig::Dncnn(DncnnConfig {
                out_channels: 1,
                ..Default::default()
            }),
            "denoiser.residual",
        ),
    ];
    for (c, field) in cases {
        match c.build().err().expect("invalid config must not build") {
            Error::InvalidConfig { field: f, .. } => assert_eq!(f, field),
            other => panic!("expected InvalidConfig for {field}, got {other}"),
        }
    }
    #[cfg(not(feature = "torch"))]
    {
        let c = DenoiserConfig::Drunet(DrunetConfig {
            engine: tessera::nn::Engine::Torch,
            nc: vec![4, 4, 4, 4],
            nb: 1,
            ..d
        });
        let e = c.build().err().unwrap().to_string();
        assert!(e.contains("rebuild with --features torch"), "{e}");
    }
    let e = toml::from_str::<DrunetConfig>("nc = [1,2,3,4]\nnbb = 2\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nbb"), "{e}");
}

#[test]
fn random_weights_are_announced_in_the_name() {
    let c = DenoiserConfig::Drunet(DrunetConfig {
        nc: vec![4, 4, 4, 4],
        nb: 1,
        in_channels: 1,
        out_channels: 1,
        ..Default::default()
    });
    let net = c.build().unwrap();
    assert!(net.name().contains("RANDOM WEIGHTS"), "{}", net.name());
    // Without a fixed dim the 2-D network also takes volumes (inflated kernels).
    let y = net.denoise(&Tensor::zeros(&[1, 1, 5, 20, 9]), 0.1).unwrap();
    assert_eq!(y.shape(), &[1, 1, 5, 20, 9]);
}

#[test]
fn drunet_runs_through_the_tiled_denoiser() {
    let dict = StateDict::load(&fixtures().join("drunet2d_gray.safetensors")).unwrap();
    let arch = arch_of("drunet2d_gray");
    let x = read_npy(&fixtures().join("drunet2d_gray_x.npy")).unwrap();
    let whole = Drunet::from_state_dict(arch.clone(), dict.clone(), false)
        .unwrap()
        .denoise(&x, 0.1)
        .unwrap();
    let tiled = |batch| {
        let net = Drunet::from_state_dict(arch.clone(), dict.clone(), false).unwrap();
        TiledDenoiser::new(Box::new(net), Box::new(OverlapTiling::new(24, 16)), batch)
            .denoise(&x, 0.1)
            .unwrap()
    };
    let all_at_once = tiled(None);
    let one_by_one = tiled(Some(1));
    assert_eq!(all_at_once.shape(), x.shape());
    // Patches in one batch are independent: batching changes nothing.
    assert!(all_at_once.max_abs_diff(&one_by_one) <= 1e-6);
    // 16 px of context per side: close to the whole-image result, not equal.
    let rel = all_at_once.sub(&whole).norm() / whole.norm();
    assert!(rel < 0.2, "tiled vs whole relative difference {rel}");
}

/// DnCNN against deepinv 0.5.0 (fixtures from scripts/make_dncnn_fixtures.py: seeded random
/// weights, with and without biases, 2-D colour and grey, 3-D), built from a preset config the way
/// a user would, with the weights resolved against the config's folder and `dim` from the weights.
#[test]
fn dncnn_matches_deepinv() {
    for (name, channels, depth, nf, bias) in [
        ("dncnn2d_color", 3, 5, 16, true),
        ("dncnn2d_gray_nobias", 1, 4, 8, false),
        ("dncnn3d_gray", 1, 3, 8, true),
    ] {
        let text = format!(
            "kind = \"dncnn\"\nweights = \"{name}.pth\"\nin_channels = {channels}\n\
             out_channels = {channels}\ndepth = {depth}\nnf = {nf}\nbias = {bias}\n"
        );
        let mut config: DenoiserConfig = toml::from_str(&text).unwrap();
        for p in config.paths_mut() {
            *p = fixtures().join(&*p);
        }
        let net = config.build().unwrap();
        let x = read_npy(&fixtures().join(format!("{name}_x.npy"))).unwrap();
        let want = read_npy(&fixtures().join(format!("{name}_y.npy"))).unwrap();
        let got = net.denoise(&x, 0.1).unwrap();
        assert_eq!(got.shape(), want.shape(), "{name}");
        let err = got.max_abs_diff(&want);
        println!("{name}: max abs error {err:.2e}");
        assert!(err <= 1e-4, "{name}: max abs error {err}");
    }
}
