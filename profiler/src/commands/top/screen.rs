//! `profiler top`'s full-screen view: a thread of its own that owns the terminal, reads keys
//! and draws the windows' functions as they come, so that keys and resizes are answered while
//! the session drains and names.
//!
//! The terminal is given back (raw mode off, the alternate screen left, the cursor shown) on
//! every way out: the quit key (which then stops the session with a SIGTERM to the profiler,
//! the way out the session already has), the session ending (the view is closed as sampling
//! stops, before anything else is said), an error drawing, and a panic anywhere (a hook).
use std::{
    io::stdout,
    sync::{
        Once,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, Sender, TryRecvError},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, Result};
use crossterm::{
    cursor,
    event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers},
    execute,
    terminal::{self, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{
    DefaultTerminal, Frame,
    layout::{Constraint, Layout},
    prelude::CrosstermBackend,
    style::{Modifier, Style},
    text::Line,
    widgets::{Paragraph, Row, Table, Wrap},
};

use crate::render::hot_functions::{HotFunctions, SortBy, clip};

/// The smallest terminal the view draws in; a smaller one is told so.
const MIN_WIDTH: u16 = 60;
const MIN_HEIGHT: u16 = 5;

/// How long the view waits for a key before it looks for a window.
const POLL: Duration = Duration::from_millis(100);

/// Width of the process column.
const PROCESS_WIDTH: u16 = 24;

/// The full-screen view, open until dropped.
pub struct Screen {
    windows: Option<Sender<HotFunctions>>,
    thread: Option<JoinHandle<()>>,
}

/// Whether the terminal is in the view's state (for the panic hook).
static OPEN: AtomicBool = AtomicBool::new(false);

impl Screen {
    /// Takes the terminal over (raw mode, the alternate screen) and starts the view of `title`.
    pub fn open(title: String) -> Result<Self> {
        static PANIC_HOOK: Once = Once::new();
        PANIC_HOOK.call_once(|| {
            let hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                hook(info);
            }));
        });
        let terminal = take_over().inspect_err(|_| restore()).context("cannot open the full-screen view")?;
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("top view".into())
            .spawn(move || view(terminal, title, &receiver))
            .inspect_err(|_| restore())
            .context("cannot start the full-screen view")?;
        Ok(Self { windows: Some(sender), thread: Some(thread) })
    }

    /// Shows a window's functions (unless the view was quit).
    pub fn show(&mut self, functions: HotFunctions) {
        if let Some(windows) = &self.windows {
            let _ = windows.send(functions);
        }
    }
}

impl Drop for Screen {
    /// Closes the view and waits for the terminal to be given back.
    fn drop(&mut self) {
        self.windows.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        restore();
    }
}

/// Raw mode, the alternate screen, the cursor hidden.
fn take_over() -> Result<DefaultTerminal> {
    OPEN.store(true, Ordering::SeqCst);
    terminal::enable_raw_mode()?;
    execute!(stdout(), EnterAlternateScreen, cursor::Hide)?;
    Ok(ratatui::Terminal::new(CrosstermBackend::new(stdout()))?)
}

/// Gives the terminal back as it was, if the view has it.
fn restore() {
    if OPEN.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(stdout(), LeaveAlternateScreen, cursor::Show);
    }
}

/// The view's thread: draws until quit (then stops the session) or until the session closes it.
fn view(mut terminal: DefaultTerminal, title: String, windows: &Receiver<HotFunctions>) {
    let mut state = State::new(title);
    let ended = state.run(&mut terminal, windows);
    drop(terminal);
    restore();
    match ended {
        Ok(Ended::Closed) => {}
        Ok(Ended::Quit) => stop_session(),
        Err(err) => {
            eprintln!("profiler: error: the full-screen view failed: {err}");
            stop_session();
        }
    }
}

/// Stops the session as a SIGTERM does: it is handled by then (the view opens at the first
/// window, once sampling runs).
fn stop_session() {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM);
}

/// Why the view ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The user quit.
    Quit,
    /// The session closed it.
    Closed,
}

/// What the view shows and how.
struct State {
    title: String,
    last: HotFunctions,
    since_start: HotFunctions,
    /// While paused: what was shown when paused (`last`, `since_start`), windows still counted.
    paused: Option<(HotFunctions, HotFunctions)>,
    sort: SortBy,
    /// Since the start rather than the last interval.
    cumulative: bool,
    filter: String,
    /// Keys go to the filter.
    editing: bool,
}

impl State {
    fn new(title: String) -> Self {
        Self {
            title,
            last: HotFunctions::default(),
            since_start: HotFunctions::default(),
            paused: None,
            sort: SortBy::SelfWeight,
            cumulative: false,
            filter: String::new(),
            editing: false,
        }
    }

    fn run(
        &mut self,
        terminal: &mut DefaultTerminal,
        windows: &Receiver<HotFunctions>,
    ) -> std::io::Result<Ended> {
        let mut dirty = true;
        loop {
            loop {
                match windows.try_recv() {
                    Ok(window) => {
                        self.since_start.add(&window);
                        self.last = window;
                        dirty |= self.paused.is_none();
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(Ended::Closed),
                }
            }
            if dirty {
                terminal.draw(|frame| self.draw(frame))?;
                dirty = false;
            }
            if event::poll(POLL)? {
                match event::read()? {
                    Event::Key(key) if key.kind == KeyEventKind::Press => {
                        if self.key(key) == Some(Ended::Quit) {
                            return Ok(Ended::Quit);
                        }
                        dirty = true;
                    }
                    Event::Resize(..) => dirty = true,
                    _ => {}
                }
            }
        }
    }

    /// Acts on a key; `Some(Ended::Quit)` to quit.
    fn key(&mut self, key: KeyEvent) -> Option<Ended> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Ended::Quit);
        }
        if self.editing {
            match key.code {
                KeyCode::Char(c) => self.filter.push(c),
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.filter.clear();
                    self.editing = false;
                }
                _ => {}
            }
            return None;
        }
        match key.code {
            KeyCode::Char('q') => return Some(Ended::Quit),
            KeyCode::Char('s') => self.sort = SortBy::SelfWeight,
            KeyCode::Char('t') => self.sort = SortBy::TotalWeight,
            KeyCode::Char('c') => self.cumulative = !self.cumulative,
            KeyCode::Char('/') => {
                self.filter.clear();
                self.editing = true;
            }
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char(' ') => {
                self.paused = match self.paused {
                    Some(_) => None,
                    None => Some((self.last.clone(), self.since_start.clone())),
                }
            }
            _ => {}
        }
        None
    }

    fn draw(&self, frame: &mut Frame) {
        let area = frame.area();
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            let message = format!(
                "The terminal is too small for profiler top ({}×{}): it needs {MIN_WIDTH}×{MIN_HEIGHT}.",
                area.width, area.height
            );
            frame.render_widget(Paragraph::new(message).wrap(Wrap { trim: true }), area);
            return;
        }
        let [header, body, footer] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1), Constraint::Length(1)]).areas(area);
        let (last, since_start) =
            self.paused.as_ref().map_or((&self.last, &self.since_start), |(l, s)| (l, s));
        let (functions, span) = match self.cumulative {
            true => (since_start, "since the start"),
            false => (last, "last"),
        };
        let sort = match self.sort {
            SortBy::SelfWeight => "self",
            SortBy::TotalWeight => "total",
        };
        let paused = if self.paused.is_some() { " · PAUSED" } else { "" };
        let title = format!(
            "profiler top · {} · {span} {:.1} s · {} · by {sort}{paused}",
            self.title,
            functions.duration_ns as f64 / 1e9,
            functions.describe_total()
        );
        frame.render_widget(Line::from(title).style(Style::new().add_modifier(Modifier::BOLD)), header);
        let rows = functions
            .rows(self.sort, &self.filter)
            .into_iter()
            .take(body.height.saturating_sub(1).into())
            .map(|function| {
                Row::new([
                    format!("{:5.1}", functions.share(function.self_weight)),
                    format!("{:6.1}", functions.share(function.total_weight)),
                    function.kind.to_owned(),
                    clip(&function.process_label(), PROCESS_WIDTH.into()),
                    function.name.clone(),
                ])
            });
        let widths = [
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(PROCESS_WIDTH),
            Constraint::Fill(1),
        ];
        let heading = Row::new([" SELF%", "TOTAL%", "KIND", "PROCESS", "FUNCTION"])
            .style(Style::new().add_modifier(Modifier::REVERSED));
        frame.render_widget(Table::new(rows, widths).header(heading), body);
        let keys = if self.editing {
            format!("filter: {}▏ (Enter keeps it, Esc clears it)", self.filter)
        } else {
            let filter = if self.filter.is_empty() { String::new() } else { format!(" [{}]", self.filter) };
            format!(
                "q quit · s/t sort by self/total · c last/since the start · / filter{filter} · space pause"
            )
        };
        frame.render_widget(Line::from(keys), footer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(state: &mut State, code: KeyCode) -> Option<Ended> {
        state.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn keys_change_the_view() {
        let mut state = State::new("PID 1".into());
        press(&mut state, KeyCode::Char('t'));
        assert_eq!(state.sort, SortBy::TotalWeight);
        press(&mut state, KeyCode::Char('c'));
        assert!(state.cumulative);
        press(&mut state, KeyCode::Char(' '));
        assert!(state.paused.is_some());
        press(&mut state, KeyCode::Char('/'));
        for c in "hq".chars() {
            assert_eq!(press(&mut state, KeyCode::Char(c)), None, "q is text while filtering");
        }
        press(&mut state, KeyCode::Enter);
        assert_eq!(state.filter, "hq");
        assert_eq!(press(&mut state, KeyCode::Char('q')), Some(Ended::Quit));
        assert_eq!(state.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Ended::Quit));
    }
}
