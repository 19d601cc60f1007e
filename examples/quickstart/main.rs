//! Quickstart workload for tunectl: a parallel integer reduction on the CPU.
//!
//! The program sums `n` pseudo-random 20-bit integers (splitmix64 of the
//! index, generated on the fly), `passes` times, and writes the exact sum to
//! `--out`. Each pass is timed; timings go to `--result` as JSON.
//!
//! Knobs:
//!   --threads T   worker threads (std::thread::scope)
//!   --block B     chunk size (power of two, 256..=65536) that each worker pulls
//!                 from a shared atomic counter
//!   --accum MODE  f64 | i64 | f32 | i32 (see README.md: f32 changes the
//!                 output, i32 overflows and panics)
//!
//! Chunk partial sums are combined in chunk order, so the output depends only
//! on (n, block, accum) and never on thread count or scheduling. For f64 and
//! i64 the arithmetic is exact, so the output does not depend on block either.
//!
//! Only std is used, so this builds anywhere with a Rust toolchain.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

const USAGE: &str = "\
usage: quickstart [--threads T] [--block B] [--accum f64|i64|f32|i32]
                  [--n N] [--passes P] [--out FILE] [--result FILE]

  --threads T   worker threads, 1..=256                      (default 1)
  --block B     chunk size, power of two in 256..=65536      (default 4096)
  --accum MODE  accumulator: f64 (exact, baseline), i64 (exact),
                f32 (inexact: output differs), i32 (overflows: panics)
                                                             (default f64)
  --n N         number of values to sum, >= 1                (default 2000000)
  --passes P    timed passes, >= 1                           (default 3)
  --out FILE    file that receives the exact sum and n       (default out.txt)
  --result FILE JSON metrics file (default: $TUNECTL_RESULT if set, else none)";

/// Each value is splitmix64(index) masked to this many bits.
const VALUE_BITS: u32 = 20;
/// Extra mixing rounds per value, so that a pass does a realistic amount of
/// work per element (tuned for ~20-80 ms per run at n = 2,000,000).
const MIX_ROUNDS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    F64,
    I64,
    F32,
    I32,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::F64 => "f64",
            Mode::I64 => "i64",
            Mode::F32 => "f32",
            Mode::I32 => "i32",
        }
    }
}

struct Config {
    threads: usize,
    block: u64,
    mode: Mode,
    n: u64,
    passes: u32,
    out: String,
    result: Option<String>,
}

fn usage_error(msg: &str) -> ! {
    eprintln!("quickstart: error: {msg}");
    eprintln!("{USAGE}");
    process::exit(2);
}

fn parse_num<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| usage_error(&format!("{flag}: invalid number '{value}'")))
}

fn parse_args() -> Config {
    let mut cfg = Config {
        threads: 1,
        block: 4096,
        mode: Mode::F64,
        n: 2_000_000,
        passes: 3,
        out: "out.txt".to_string(),
        result: env::var("TUNECTL_RESULT").ok().filter(|s| !s.is_empty()),
    };
    let mut args = env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            process::exit(0);
        }
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let known = [
            "--threads",
            "--block",
            "--accum",
            "--n",
            "--passes",
            "--out",
            "--result",
        ];
        if !known.contains(&flag.as_str()) {
            usage_error(&format!("unknown argument '{arg}'"));
        }
        let value = match inline {
            Some(v) => v,
            None => match args.next() {
                Some(v) if !v.starts_with("--") => v,
                _ => usage_error(&format!("{flag} requires a value")),
            },
        };
        match flag.as_str() {
            "--threads" => {
                let t: usize = parse_num(&flag, &value);
                if !(1..=256).contains(&t) {
                    usage_error(&format!("--threads must be in 1..=256, got {t}"));
                }
                cfg.threads = t;
            }
            "--block" => {
                let b: u64 = parse_num(&flag, &value);
                if !b.is_power_of_two() || !(256..=65536).contains(&b) {
                    usage_error(&format!(
                        "--block must be a power of two in 256..=65536, got {b}"
                    ));
                }
                cfg.block = b;
            }
            "--accum" => {
                cfg.mode = match value.as_str() {
                    "f64" => Mode::F64,
                    "i64" => Mode::I64,
                    "f32" => Mode::F32,
                    "i32" => Mode::I32,
                    other => usage_error(&format!(
                        "--accum must be one of f64, i64, f32, i32, got '{other}'"
                    )),
                };
            }
            "--n" => {
                let n: u64 = parse_num(&flag, &value);
                if n == 0 || n > (1 << 40) {
                    usage_error(&format!("--n must be in 1..=2^40, got {n}"));
                }
                cfg.n = n;
            }
            "--passes" => {
                let p: u32 = parse_num(&flag, &value);
                if p == 0 {
                    usage_error("--passes must be >= 1");
                }
                cfg.passes = p;
            }
            "--out" => {
                if value.is_empty() {
                    usage_error("--out must not be empty");
                }
                cfg.out = value;
            }
            "--result" => {
                if value.is_empty() {
                    usage_error("--result must not be empty");
                }
                cfg.result = Some(value);
            }
            _ => unreachable!(),
        }
    }
    cfg
}

/// splitmix64 finalizer.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The i-th input value: splitmix64 of the index, masked to VALUE_BITS bits.
#[inline(always)]
fn value(i: u64) -> u32 {
    let mut z = mix(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for _ in 0..MIX_ROUNDS {
        z = mix(z.wrapping_add(0x9E37_79B9_7F4A_7C15));
    }
    (z & ((1 << VALUE_BITS) - 1)) as u32
}

/// An accumulator type. `add` must be cheap; errors (i32 overflow) are
/// recorded in the value and reported by `check`.
trait Accum: Copy + Send {
    const ZERO: Self;
    fn add(self, v: u32) -> Self;
    fn combine(self, other: Self) -> Self;
    /// The accumulated sum, or None if it overflowed.
    fn check(self) -> Option<u64>;
}

impl Accum for f64 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn add(self, v: u32) -> Self {
        self + v as f64
    }
    fn combine(self, other: Self) -> Self {
        self + other
    }
    fn check(self) -> Option<u64> {
        Some(self as u64)
    }
}

impl Accum for i64 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn add(self, v: u32) -> Self {
        self.wrapping_add(v as i64)
    }
    fn combine(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
    fn check(self) -> Option<u64> {
        Some(self as u64)
    }
}

impl Accum for f32 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn add(self, v: u32) -> Self {
        self + v as f32
    }
    fn combine(self, other: Self) -> Self {
        self + other
    }
    fn check(self) -> Option<u64> {
        Some(self as u64)
    }
}

/// Checked 32-bit accumulator: the overflow flag is sticky.
#[derive(Clone, Copy)]
struct CheckedI32 {
    sum: i32,
    overflow: bool,
}

impl Accum for CheckedI32 {
    const ZERO: Self = CheckedI32 {
        sum: 0,
        overflow: false,
    };
    #[inline(always)]
    fn add(self, v: u32) -> Self {
        // v < 2^20, so the cast to i32 is lossless.
        let (sum, o) = self.sum.overflowing_add(v as i32);
        CheckedI32 {
            sum,
            overflow: self.overflow | o,
        }
    }
    fn combine(self, other: Self) -> Self {
        let (sum, o) = self.sum.overflowing_add(other.sum);
        CheckedI32 {
            sum,
            overflow: self.overflow | other.overflow | o,
        }
    }
    fn check(self) -> Option<u64> {
        if self.overflow {
            None
        } else {
            Some(self.sum as u64)
        }
    }
}

fn chunk_sum<A: Accum>(start: u64, end: u64) -> A {
    let mut acc = A::ZERO;
    for i in start..end {
        acc = acc.add(value(i));
    }
    acc
}

/// One pass: workers pull chunks of `block` indices from a shared atomic
/// counter; chunk partials are then combined in chunk order, which makes the
/// result independent of the thread count and of scheduling.
/// Returns the sum (or the index of the first chunk whose partial
/// overflowed), and the median time one chunk took, in microseconds: the
/// latency a caller waiting on one chunk would see.
fn run_pass<A: Accum>(cfg: &Config) -> (Result<u64, u64>, f64) {
    let n = cfg.n;
    let block = cfg.block;
    let nchunks = n.div_ceil(block);
    let next = AtomicU64::new(0);
    let mut partials: Vec<Option<A>> = vec![None; nchunks as usize];
    let mut chunk_us: Vec<f64> = Vec::with_capacity(nchunks as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|_| {
                let next = &next;
                s.spawn(move || {
                    let mut mine: Vec<(u64, A, f64)> = Vec::new();
                    loop {
                        let c = next.fetch_add(1, Ordering::Relaxed);
                        if c >= nchunks {
                            break;
                        }
                        let start = c * block;
                        let end = (start + block).min(n);
                        let t0 = Instant::now();
                        let partial = chunk_sum::<A>(start, end);
                        mine.push((c, partial, t0.elapsed().as_secs_f64() * 1e6));
                    }
                    mine
                })
            })
            .collect();
        for h in handles {
            for (c, p, us) in h.join().expect("worker thread panicked") {
                partials[c as usize] = Some(p);
                chunk_us.push(us);
            }
        }
    });
    chunk_us.sort_by(f64::total_cmp);
    let median_us = chunk_us[chunk_us.len() / 2];
    let mut total = A::ZERO;
    for (c, p) in partials.into_iter().enumerate() {
        let p = p.expect("every chunk is computed exactly once");
        total = total.combine(p);
        if total.check().is_none() {
            return (Err(c as u64 * block), median_us);
        }
    }
    (Ok(total.check().expect("checked above")), median_us)
}

fn run<A: Accum>(cfg: &Config) -> (u64, Vec<f64>, Vec<f64>) {
    let mut times_ms = Vec::with_capacity(cfg.passes as usize);
    let mut chunk_us = Vec::with_capacity(cfg.passes as usize);
    let mut sum: Option<u64> = None;
    for pass in 0..cfg.passes {
        let t0 = Instant::now();
        let (r, us) = run_pass::<A>(cfg);
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        let s = match r {
            Ok(s) => s,
            Err(at) => panic!(
                "accumulator overflow: i32 cannot hold the sum of n={} values \
                 (overflowed in the chunk at index {at}); use --accum i64 or f64",
                cfg.n
            ),
        };
        if let Some(prev) = sum
            && prev != s
        {
            panic!("pass {pass} produced sum {s}, but the previous pass produced {prev}");
        }
        sum = Some(s);
        times_ms.push(dt);
        chunk_us.push(us);
    }
    (sum.expect("passes >= 1"), times_ms, chunk_us)
}

fn write_file(path: &str, contents: &str) {
    if let Err(e) = fs::write(path, contents) {
        eprintln!("quickstart: error: cannot write '{path}': {e}");
        process::exit(1);
    }
}

fn main() {
    let cfg = parse_args();
    let (sum, times_ms, chunk_us) = match cfg.mode {
        Mode::F64 => run::<f64>(&cfg),
        Mode::I64 => run::<i64>(&cfg),
        Mode::F32 => run::<f32>(&cfg),
        Mode::I32 => run::<CheckedI32>(&cfg),
    };

    // The gated output: only the result, nothing that depends on the knobs.
    write_file(&cfg.out, &format!("n {}\nsum {}\n", cfg.n, sum));

    let total_ms: f64 = times_ms.iter().sum();
    let elems = cfg.n as f64 * f64::from(cfg.passes);
    // Melem/s = elements / (ms * 1000).
    let throughput = elems / (total_ms.max(1e-6) * 1e3);

    if let Some(path) = &cfg.result {
        let mut json = String::new();
        write!(
            json,
            "{{\"metrics\": {{\"throughput\": {throughput:.3}, \"time_ms\": ["
        )
        .unwrap();
        for (i, t) in times_ms.iter().enumerate() {
            if i > 0 {
                json.push_str(", ");
            }
            write!(json, "{t:.4}").unwrap();
        }
        json.push_str("], \"chunk_us\": [");
        for (i, t) in chunk_us.iter().enumerate() {
            if i > 0 {
                json.push_str(", ");
            }
            write!(json, "{t:.3}").unwrap();
        }
        json.push_str("]}}\n");
        write_file(path, &json);
    }

    let times: Vec<String> = times_ms.iter().map(|t| format!("{t:.2}")).collect();
    let chunks: Vec<String> = chunk_us.iter().map(|t| format!("{t:.1}")).collect();
    println!(
        "quickstart: accum={} threads={} block={} n={} passes={} sum={} \
         time_ms=[{}] chunk_us=[{}] throughput={:.1} Melem/s",
        cfg.mode.name(),
        cfg.threads,
        cfg.block,
        cfg.n,
        cfg.passes,
        sum,
        times.join(", "),
        chunks.join(", "),
        throughput
    );
}
