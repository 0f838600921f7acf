//! `tessera selftest` on a machine without a GPU: one clear error naming what is missing and a
//! non-zero exit, never a panic (the GPU run itself is scripts/device-check.sh's).

use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("the tessera binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn selftest_without_a_gpu_says_what_is_missing() {
    let o = tessera(&["selftest", "--device", "cuda", "--quick"]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    if cfg!(feature = "cuda") {
        // CI machines have no NVIDIA driver; a GPU machine would run the checks instead.
        assert!(
            e.contains("no NVIDIA driver") || e.contains("device checks"),
            "{e}"
        );
    } else {
        assert!(
            e.contains("without GPU support") && e.contains("--features cuda"),
            "{e}"
        );
    }
}

#[test]
fn selftest_refuses_the_cpu_and_unknown_devices() {
    let o = tessera(&["selftest", "--device", "cpu"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--device cuda"), "{}", stderr(&o));
    let o = tessera(&["selftest", "--device", "tpu"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("expected cpu, cuda or cuda:N, got `tpu`"),
        "{}",
        stderr(&o)
    );
}
