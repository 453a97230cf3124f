//! The 60/30/10 workload of split.c in Rust, built as a release binary with default settings
//! (no forced frame pointers): main -> burn -> run_round -> x_outer -> x_middle -> x_inner -> hot_x.
//!
//! usage: split-rs [SECONDS]   (0 or absent: until killed)
use std::hint::black_box;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Completed rounds, reported every 100 ms with PROGRESS=1 (as "SECONDS ROUNDS").
static ROUNDS: AtomicU64 = AtomicU64::new(0);

fn report_progress() {
    if std::env::var("PROGRESS").is_ok_and(|v| v == "1") {
        let start = Instant::now();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{:.3} {}", start.elapsed().as_secs_f64(), ROUNDS.load(Ordering::Relaxed));
            let _ = out.flush();
        });
    }
}

macro_rules! chain {
    ($leaf:ident, $inner:ident, $middle:ident, $outer:ident, $seed:literal) => {
        #[inline(never)]
        fn $leaf(units: u64) {
            // A seed of its own per leaf: identical functions would be merged into one.
            let mut x: u64 = black_box($seed);
            for _ in 0..units * 100_000 {
                x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
            }
            black_box(x);
        }
        #[inline(never)]
        fn $inner(units: u64) {
            $leaf(black_box(units));
            black_box(());
        }
        #[inline(never)]
        fn $middle(units: u64) {
            $inner(black_box(units));
            black_box(());
        }
        #[inline(never)]
        fn $outer(units: u64) {
            $middle(black_box(units));
            black_box(());
        }
    };
}
chain!(hot_a, a_inner, a_middle, a_outer, 1);
chain!(hot_b, b_inner, b_middle, b_outer, 2);
chain!(hot_c, c_inner, c_middle, c_outer, 3);

#[inline(never)]
fn run_round() {
    a_outer(black_box(6));
    b_outer(black_box(3));
    c_outer(black_box(1));
    ROUNDS.fetch_add(1, Ordering::Relaxed);
}

#[inline(never)]
fn burn(seconds: f64) {
    let stop = (seconds > 0.0).then(|| Instant::now() + Duration::from_secs_f64(seconds));
    while stop.is_none_or(|stop| Instant::now() < stop) {
        run_round();
    }
    black_box(());
}

fn main() {
    let seconds = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    report_progress();
    burn(seconds);
}
