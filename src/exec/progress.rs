//! Progress for people, on stderr: an indicatif bar on a terminal, plain
//! periodic lines otherwise (CI, pipes). The scheduler only emits events.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    Bar,
    Plain,
    /// Nothing but warnings and the final summary.
    Quiet,
}

/// What the scheduler tells the reporters.
#[derive(Debug, Clone)]
pub enum Event {
    /// Trials this launch will try to run, and those found done.
    Planned {
        to_run: u64,
        already_done: u64,
    },
    /// More trials joined the launch (anchors, re-measurements, a
    /// confirmation round): counted, not announced.
    More {
        count: u64,
    },
    HostReady {
        host: String,
        class: String,
        label: String,
    },
    Started,
    Finished {
        ok: bool,
        lost: bool,
        /// `config @ cell: class: detail` for failures.
        failure: Option<String>,
    },
    /// Trials that will not run, with why; `announce` prints the reason.
    Skipped {
        count: u64,
        reason: String,
        announce: bool,
    },
    Note(String),
    /// Shown in every mode, `quiet` included.
    Warn(String),
}

#[derive(Default)]
struct Counts {
    total: u64,
    done: u64,
    ok: u64,
    failed: u64,
    lost: u64,
    running: u64,
    skipped: u64,
}

impl Counts {
    fn line(&self) -> String {
        format!(
            "{}/{} trials · ok {} · failed {} · running {}{}{}",
            self.done + self.skipped,
            self.total,
            self.ok,
            self.failed,
            self.running,
            if self.lost > 0 {
                format!(" · lost {}", self.lost)
            } else {
                String::new()
            },
            if self.skipped > 0 {
                format!(" · skipped {}", self.skipped)
            } else {
                String::new()
            },
        )
    }
}

/// Consume events until the channel closes.
pub async fn report(mode: ProgressMode, mut rx: mpsc::UnboundedReceiver<Event>) {
    let mode = match mode {
        ProgressMode::Auto
            if std::io::stderr().is_terminal() && std::env::var_os("CI").is_none() =>
        {
            ProgressMode::Bar
        }
        ProgressMode::Auto => ProgressMode::Plain,
        m => m,
    };
    let bar = (mode == ProgressMode::Bar).then(|| {
        let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg} · ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    // Host names, failure details and trial output are shown escaped
    // (crate::term), never obeyed.
    let say = |text: &str| match &bar {
        Some(b) => b.println(crate::term::escape_block(text)),
        None if mode != ProgressMode::Quiet => eprintln!("{}", crate::term::escape_block(text)),
        None => {}
    };
    let mut c = Counts::default();
    let started = Instant::now();
    let mut last_line = Instant::now();
    let period = Duration::from_secs(10);
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::More { count } => c.total += count,
                    Event::Planned { to_run, already_done } => {
                        c.total += to_run;
                        if already_done > 0 {
                            say(&format!("{already_done} trials already in the ledger; not running them again"));
                        }
                        say(&format!("{to_run} trials to run"));
                    }
                    Event::HostReady { host, class, label } => say(&format!("host {host}: class {class} ({label})")),
                    Event::Started => c.running += 1,
                    Event::Finished { ok, lost, failure } => {
                        c.running = c.running.saturating_sub(1);
                        if lost {
                            c.lost += 1;
                            c.total += 0;
                        } else {
                            c.done += 1;
                            if ok { c.ok += 1 } else { c.failed += 1 }
                        }
                        if let Some(f) = failure {
                            say(&format!("rejected {f}"));
                        }
                    }
                    Event::Skipped { count, reason, announce } => {
                        c.skipped += count;
                        if announce {
                            say(&format!("skipping {count} trials: {reason}"));
                        }
                    }
                    Event::Note(n) => say(&n),
                    Event::Warn(w) => match &bar {
                        Some(b) => b.println(crate::term::escape_block(&w)),
                        None => eprintln!("{}", crate::term::escape_block(&w)),
                    },
                }
                if let Some(b) = &bar {
                    b.set_length(c.total);
                    b.set_position(c.done + c.skipped);
                    b.set_message(c.line());
                }
            }
            _ = tick.tick() => {
                if mode == ProgressMode::Plain && last_line.elapsed() >= period {
                    eprintln!("progress: {} ({}s)", c.line(), started.elapsed().as_secs());
                    last_line = Instant::now();
                }
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if mode != ProgressMode::Quiet || c.failed + c.lost > 0 {
        eprintln!(
            "finished: {} in {:.1}s",
            c.line(),
            started.elapsed().as_secs_f64()
        );
    }
}
