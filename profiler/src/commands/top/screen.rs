//! `profiler top`'s full-screen view: a thread of its own that owns the terminal, reads keys
//! and draws the windows' functions as they come, so that keys and resizes are answered while
//! the session drains and names. Rows are functions, or functions in each thread; the selected
//! one's hottest call paths open as a tree in place of the table.
//!
//! The terminal is given back (raw mode off, the alternate screen left, the cursor shown) on
//! every way out: the quit key (which then stops the session with a SIGTERM to the profiler,
//! the way out the session already has), the session ending (the view is closed as sampling
//! stops, before anything else is said), an error drawing, and a panic anywhere (a hook).
use std::{
    borrow::Cow,
    fs::File,
    io::{IsTerminal as _, stdout},
    os::fd::{AsFd as _, OwnedFd},
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
    layout::Rect,
    layout::{Constraint, Layout},
    prelude::CrosstermBackend,
    style::{Modifier, Style},
    text::Line,
    widgets::{Paragraph, Row, Table, TableState, Wrap},
};
use rustix::event::{PollFd, PollFlags, Timespec};

use crate::render::hot_functions::{HotFunctions, Place, SortBy, Split, TREE_PATHS, clip};

/// The smallest terminal the view draws in; a smaller one is told so.
const MIN_WIDTH: u16 = 60;
const MIN_HEIGHT: u16 = 5;

/// How long the view waits for a key before it looks for a window.
const POLL: Duration = Duration::from_millis(100);

/// Width of the process column: a command name and a process and thread id fit.
const PROCESS_WIDTH: u16 = 30;

/// The full-screen view, open until dropped.
pub(super) struct Screen {
    windows: Option<Sender<HotFunctions>>,
    thread: Option<JoinHandle<()>>,
}

/// Whether the terminal is in the view's state (for the panic hook).
static OPEN: AtomicBool = AtomicBool::new(false);

impl Screen {
    /// Takes the terminal over (raw mode, the alternate screen) and starts the view of `title`.
    pub(super) fn open(title: String) -> Result<Self> {
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
    pub(super) fn show(&mut self, functions: HotFunctions) {
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
    if matches!(ended, Ok(Ended::HungUp)) {
        // Before the terminal is let go, which writes to it (and a failed write panics).
        crate::session::terminal_gone();
    }
    drop(terminal);
    restore();
    match ended {
        Ok(Ended::Closed) => {}
        // Ends as the quit key does: the outputs are written.
        Ok(Ended::Quit | Ended::HungUp) => stop_session(),
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
    /// The terminal hung up (its window closed, its tmux server killed).
    HungUp,
    /// The session closed it.
    Closed,
}

/// The terminal's input, looked at before each wait for a key: crossterm 0.29, woken by a
/// terminal that hung up, reads it again and again (every read ends at once, empty) until its
/// wait times out, or, with its default event source, for ever, at full speed and deaf to the
/// session closing the view. With its `/dev/tty` source (the `use-dev-tty` feature) the spin
/// lasts one wait, and the view then sees the hang-up here.
struct Input {
    terminal: OwnedFd,
}

impl Input {
    /// The terminal crossterm reads: standard input if it is one, else `/dev/tty`.
    fn open() -> std::io::Result<Self> {
        let stdin = std::io::stdin();
        let terminal = if stdin.is_terminal() {
            stdin.as_fd().try_clone_to_owned()?
        } else {
            File::open("/dev/tty")?.into()
        };
        Ok(Self { terminal })
    }

    /// Whether the terminal hung up.
    fn hung_up(&self) -> std::io::Result<bool> {
        let mut fds = [PollFd::new(&self.terminal, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
        Ok(fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL))
    }
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
    /// A row per function, or per function and thread.
    split: Split,
    filter: String,
    /// Keys go to the filter.
    editing: bool,
    /// The selected row, from the top (kept in the rows by [`Self::select`]).
    selected: usize,
    /// The function (name and kind) whose call paths are shown instead of the table.
    tree: Option<(String, Cow<'static, str>)>,
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
            split: Split::Merged,
            filter: String::new(),
            editing: false,
            selected: 0,
            tree: None,
        }
    }

    /// The functions shown (those of when the view was paused, while it is), and of when.
    fn shown(&self) -> (&HotFunctions, &'static str) {
        let (last, since_start) =
            self.paused.as_ref().map_or((&self.last, &self.since_start), |(l, s)| (l, s));
        match self.cumulative {
            true => (since_start, "since the start"),
            false => (last, "last"),
        }
    }

    /// Moves the selection by `rows`, within the rows shown.
    fn select(&mut self, rows: isize) {
        let (functions, _) = self.shown();
        let last = functions.rows(self.sort, &self.filter, self.split).len().saturating_sub(1);
        self.selected = self.selected.saturating_add_signed(rows).min(last);
    }

    /// Opens the tree of the selected row's function.
    fn open_tree(&mut self) {
        let (functions, _) = self.shown();
        let rows = functions.rows(self.sort, &self.filter, self.split);
        let selected = self.selected.min(rows.len().saturating_sub(1));
        self.tree = rows.get(selected).map(|row| (row.function.name.clone(), row.function.kind.clone()));
    }

    fn run(
        &mut self,
        terminal: &mut DefaultTerminal,
        windows: &Receiver<HotFunctions>,
    ) -> std::io::Result<Ended> {
        let input = Input::open()?;
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
            if input.hung_up()? {
                return Ok(Ended::HungUp);
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
            KeyCode::Char('h' | 'H') => {
                self.split = match self.split {
                    Split::Merged => Split::ByThread,
                    Split::ByThread => Split::Merged,
                }
            }
            KeyCode::Up => self.select(-1),
            KeyCode::Down => self.select(1),
            KeyCode::Enter if self.tree.is_some() => self.tree = None,
            KeyCode::Enter => self.open_tree(),
            KeyCode::Char('/') => {
                self.filter.clear();
                self.selected = 0;
                self.editing = true;
            }
            KeyCode::Esc if self.tree.is_some() => self.tree = None,
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
        let (functions, span) = self.shown();
        let sort = match self.sort {
            SortBy::SelfWeight => "self",
            SortBy::TotalWeight => "total",
        };
        let threads = if self.split == Split::ByThread { " · threads" } else { "" };
        let paused = if self.paused.is_some() { " · PAUSED" } else { "" };
        let title = format!(
            "profiler top · {} · {span} {:.1} s · {} · by {sort}{threads}{paused}",
            self.title,
            functions.duration_ns as f64 / 1e9,
            functions.describe_total()
        );
        frame.render_widget(Line::from(title).style(Style::new().add_modifier(Modifier::BOLD)), header);
        match &self.tree {
            Some((name, kind)) => self.draw_tree(frame, body, functions, (name, kind)),
            None => self.draw_table(frame, body, functions),
        }
        frame.render_widget(Line::from(self.keys()), footer);
    }

    /// The rows, the selected one highlighted.
    fn draw_table(&self, frame: &mut Frame, body: Rect, functions: &HotFunctions) {
        let rows = functions.rows(self.sort, &self.filter, self.split);
        let selected = self.selected.min(rows.len().saturating_sub(1));
        let rows = rows.into_iter().map(|row| {
            Row::new([
                format!("{:5.1}", functions.share(row.weights.self_weight)),
                format!("{:6.1}", functions.share(row.weights.total_weight)),
                row.function.kind.to_string(),
                clip(&row.process_label(), PROCESS_WIDTH.into()),
                row.function.name.clone(),
            ])
        });
        let widths = [
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(PROCESS_WIDTH),
            Constraint::Fill(1),
        ];
        let process = match self.split {
            Split::Merged => "PROCESS",
            Split::ByThread => "PROCESS (PID/TID)",
        };
        let heading = Row::new([" SELF%", "TOTAL%", "KIND", process, "FUNCTION"])
            .style(Style::new().add_modifier(Modifier::REVERSED));
        let table = Table::new(rows, widths)
            .header(heading)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD));
        frame.render_stateful_widget(table, body, &mut TableState::default().with_selected(Some(selected)));
    }

    /// The tree of the hottest call paths through the function `name` of `kind`, in place of the
    /// table.
    fn draw_tree(&self, frame: &mut Frame, body: Rect, functions: &HotFunctions, (name, kind): (&str, &str)) {
        let width = body.width.into();
        let tree =
            functions.find(name, kind).map(|function| functions.call_tree(function)).unwrap_or_default();
        let heading = format!(
            "The {TREE_PATHS} hottest call paths through {name} ({kind}) and its hottest callees, \
             in shares of all samples:"
        );
        let mut lines =
            vec![Line::from(clip(&heading, width)).style(Style::new().add_modifier(Modifier::REVERSED))];
        if tree.is_empty() {
            lines.push(Line::from(format!("No sample has {name} here.")));
        }
        lines.extend(tree.iter().map(|line| {
            let style = match line.place {
                Place::Selected => Style::new().add_modifier(Modifier::BOLD),
                Place::Caller | Place::Callee => Style::new(),
            };
            Line::from(functions.tree_text(line, width)).style(style)
        }));
        frame.render_widget(Paragraph::new(lines), body);
    }

    /// The footer: what the keys do, or the filter being typed.
    fn keys(&self) -> String {
        if self.editing {
            return format!("filter: {}▏ (Enter keeps it, Esc clears it)", self.filter);
        }
        if self.tree.is_some() {
            return "Enter/Esc back to the table · c last/since the start · space pause · q quit".into();
        }
        let filter = if self.filter.is_empty() { String::new() } else { format!(" [{}]", self.filter) };
        let threads = match self.split {
            Split::Merged => "h threads",
            Split::ByThread => "h processes",
        };
        format!(
            "q quit · s/t sort by self/total · c last/since the start · {threads} · ↑/↓ Enter call paths · \
             / filter{filter} · space pause"
        )
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

    #[test]
    fn a_selected_row_opens_its_call_paths() {
        let mut state = State::new("PID 10".into());
        state.last = HotFunctions::of(&crate::model::tests::fixture());
        let rows = |state: &State| state.last.rows(state.sort, &state.filter, state.split).len();
        press(&mut state, KeyCode::Up);
        assert_eq!(state.selected, 0, "no row above the first");
        for _ in 0..rows(&state) + 2 {
            press(&mut state, KeyCode::Down);
        }
        assert_eq!(state.selected, rows(&state) - 1, "no row below the last");
        while state.selected > 0 {
            press(&mut state, KeyCode::Up);
        }
        press(&mut state, KeyCode::Enter);
        assert_eq!(state.tree, Some(("hot".to_owned(), Cow::Borrowed("Go"))), "the first row by self");
        state.filter = "hot".into();
        press(&mut state, KeyCode::Esc);
        assert_eq!((state.tree.is_none(), state.filter.as_str()), (true, "hot"), "Esc closes the tree first");
        press(&mut state, KeyCode::Enter);
        press(&mut state, KeyCode::Enter);
        assert!(state.tree.is_none(), "Enter closes it too");
        state.filter.clear();
        let merged = rows(&state);
        press(&mut state, KeyCode::Char('h'));
        assert_eq!(state.split, Split::ByThread);
        assert!(rows(&state) > merged, "a row per thread of each function");
        press(&mut state, KeyCode::Char('h'));
        assert_eq!(state.split, Split::Merged);
    }
}
