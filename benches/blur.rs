//! `cargo bench --bench blur`: the 8-operator circular Gaussian blur stack of issue 2 on a 1024×683
//! colour image, method `auto` against the `direct` baseline (see `tessera::physics::blur_bench`).
//! Optional arguments: WIDTH HEIGHT REPEATS DIRECT (0 skips the slow direct baseline).

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let width = args.first().copied().unwrap_or(1024);
    let height = args.get(1).copied().unwrap_or(683);
    let repeats = args.get(2).copied().unwrap_or(5);
    let direct = args.get(3).is_none_or(|&d| d != 0);
    match tessera::physics::blur_bench::bench_blur_stack_with(width, height, repeats, direct) {
        Ok(report) => println!("{report}\n(threads: {})", rayon::current_num_threads()),
        Err(e) => {
            eprintln!("blur bench failed: {e}");
            std::process::exit(1);
        }
    }
}
