//! `profiler top`: `record`'s CPU profile cut into windows of one interval; each window's
//! functions ([`HotFunctions`]) go to the full-screen view ([`screen`]), or, when standard
//! output is not a terminal, are printed as a plain table.
mod screen;

use std::{io::IsTerminal as _, time::Duration};

use anyhow::Result;

use self::screen::Screen;
use super::record::{self, SamplingPlan, sampling};
use crate::{
    aggregate::Detail,
    cli::{RECORD_DEFAULT_HZ, TopArgs},
    kernel::sampler::{self, Sampler},
    model::{Recording, Tgid, Weight},
    output::Outputs,
    render::{
        Format,
        hot_functions::{HotFunctions, SortBy},
    },
    session::{self, Consumer, End, Settings},
};

/// Rows of each plain table.
const PLAIN_ROWS: usize = 30;

pub(super) async fn run(args: TopArgs) -> Result<()> {
    let weight = record::weight(args.off_cpu, args.wall);
    let plan = SamplingPlan {
        default_hz: RECORD_DEFAULT_HZ,
        weight,
        runqueue: weight == Weight::WallNs,
        filter_processes: !(args.pids.is_empty() && args.command.is_empty()),
        follow_forks: true,
        ring_buffer_bytes: sampler::default_ring_bytes(weight != Weight::Samples)?,
    };
    let (cpu, settings) = sampling(&args.sampling, plan);
    let full_screen = !args.once && std::io::stdout().is_terminal();
    let interval = Duration::from_secs_f64(args.interval);
    let outputs = Outputs::resolve(&args.outputs, args.format, Format::Folded)?;
    let render = args.grouping.render_options();
    // The view's rows need each sample's process and thread; the outputs may need its time.
    let detail = Detail { time: false, process: true, thread: true }.union(outputs.detail(render.grouping));
    let settings = Settings {
        pids: args.pids.into_iter().map(Tgid).collect(),
        command: args.command,
        // One interval with --once: its window is handed over as the session ends.
        duration: if args.once { Some(args.interval) } else { settings.duration },
        // The full screen is the only thing on the terminal: no status line, no summary.
        quiet: settings.quiet || full_screen,
        detail: Some(detail),
        window: Some(interval),
        // Written at the end with every window merged (see `session::whole`).
        outputs,
        render,
        ..settings
    };
    let view = if full_screen { View::Waiting } else { View::Plain { once: args.once, printed: false } };
    let (quiet, outputs) = (args.sampling.session.quiet, settings.outputs.clone());
    session::run(cpu, Top { view, title: String::new() }, settings).await?;
    if !quiet {
        say_written(&outputs);
    }
    Ok(())
}

/// What was written, once the terminal is the shell's again (the full screen silences the
/// session's own report).
fn say_written(outputs: &Outputs) {
    let written: Vec<String> =
        outputs.paths().iter().map(|(path, format)| format!("{} ({format})", path.display())).collect();
    if !written.is_empty() {
        eprintln!("profiler: top: wrote {}", written.join(", "));
    }
}

/// `top`'s consumer of a CPU profile: each window's functions in the view.
struct Top {
    view: View,
    /// What is watched: `PID 1234`, `whole system`.
    title: String,
}

enum View {
    /// Tables on standard output; with `once`, only the first.
    Plain {
        once: bool,
        printed: bool,
    },
    /// The full-screen view, to be opened at the first window: once the session handles the
    /// signal its quit key sends.
    Waiting,
    Screen(Screen),
    /// The full-screen view closed as sampling ended: the last window is not shown.
    Closed,
}

impl Consumer<Sampler> for Top {
    fn ready(&mut self, target: &str, collecting: String) -> String {
        self.title = target.to_owned();
        format!("top: {collecting}")
    }

    fn status(&self, collecting: String) -> String {
        collecting
    }

    /// The view closes here, before the last window and the warnings: what is said after goes
    /// to the terminal as it was.
    fn sampling_ended(&mut self) {
        if matches!(self.view, View::Waiting | View::Screen(_)) {
            self.view = View::Closed;
        }
    }

    fn report(&self, _: &End<'_, Sampler>) {}

    fn window(&mut self, recording: Recording) {
        let functions = HotFunctions::of(&recording);
        match &mut self.view {
            View::Plain { once, printed } => {
                if *once && *printed {
                    return;
                }
                println!("{}", functions.to_text(&self.title, SortBy::SelfWeight, PLAIN_ROWS));
                *printed = true;
            }
            View::Waiting => match Screen::open(self.title.clone()) {
                Ok(mut screen) => {
                    screen.show(functions);
                    self.view = View::Screen(screen);
                }
                Err(err) => {
                    eprintln!("profiler: warning: {err:#}; plain tables instead");
                    println!("{}", functions.to_text(&self.title, SortBy::SelfWeight, PLAIN_ROWS));
                    self.view = View::Plain { once: false, printed: true };
                }
            },
            View::Screen(screen) => screen.show(functions),
            View::Closed => {}
        }
    }
}
