//! The functions with the most samples, as `profiler top` shows them: each function's self
//! weight (samples where it is the innermost frame) and total weight (samples where it is
//! anywhere in the stack, once however deep it recurses), the processes it ran in and its kind.
//! Computed from a [`Recording`] (one window), added up window after window for "since the
//! start", and printed as a plain table when the output is not a terminal.
use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use crate::model::{Recording, Symbol, SymbolKind, Tgid, Weight};

/// The functions of some samples, with their weights.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HotFunctions {
    /// The samples' weights, summed: what shares are of.
    pub total: u64,
    /// What weights count.
    pub weight: Weight,
    /// How long the samples were taken over.
    pub duration_ns: u64,
    pub functions: Vec<HotFunction>,
    /// Each function's index in `functions`, by its name and kind.
    index: HashMap<(String, &'static str), usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotFunction {
    /// The function's name; a script's function with its file (`qualname (file.py)`).
    pub name: String,
    /// What kind of code: `native`, `kernel`, `Python`, `Java`... (see [`kind_label`]).
    pub kind: &'static str,
    /// Weight of the samples where it is the innermost frame.
    pub self_weight: u64,
    /// Weight of the samples where it is anywhere in the stack.
    pub total_weight: u64,
    /// The processes it ran in, with their command names.
    pub processes: BTreeMap<Tgid, String>,
}

/// How rows are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    #[default]
    SelfWeight,
    TotalWeight,
}

/// The kind of code a symbol names, as `top` shows it: a runtime's language when its source file
/// says (`Python`, `Java`, `JavaScript`), else by its kind (`native`, an inlined function too;
/// `kernel`; `JIT`; `script`).
pub fn kind_label(symbol: &Symbol) -> &'static str {
    let extension = symbol.source.as_ref().and_then(|source| source.file.rsplit_once('.')).map(|(_, e)| e);
    match (extension, symbol.kind) {
        (Some("py"), _) => "Python",
        (Some("java"), _) => "Java",
        (Some("js" | "mjs" | "cjs"), _) => "JavaScript",
        (_, SymbolKind::Function | SymbolKind::Inlined) => "native",
        (_, SymbolKind::Kernel) => "kernel",
        (_, SymbolKind::Jit) => "JIT",
        (_, SymbolKind::Script) => "script",
    }
}

/// Where a sample without any frame goes.
const NO_STACK: (&str, &str) = ("[no stack]", "-");

impl HotFunctions {
    /// The functions of `recording`'s samples.
    pub fn of(recording: &Recording) -> Self {
        let mut table = Self {
            weight: recording.meta.weight,
            duration_ns: recording.meta.duration_ns,
            ..Self::default()
        };
        // Per stack: the innermost function, and every function in it once.
        let mut by_stack: HashMap<u32, (usize, Vec<usize>)> = HashMap::new();
        for sample in &recording.samples {
            let (innermost, all) = by_stack
                .entry(sample.stack)
                .or_insert_with(|| table.functions_of(recording, sample.stack))
                .clone();
            let comm = recording.comms.get(sample.comm as usize).map_or("?", String::as_str);
            table.total += sample.weight;
            table.functions[innermost].self_weight += sample.weight;
            for function in all {
                let function = &mut table.functions[function];
                function.total_weight += sample.weight;
                function.processes.entry(sample.pid).or_insert_with(|| comm.to_owned());
            }
        }
        table
    }

    /// The innermost function of `stack` and all of its functions, deduplicated, as indexes
    /// into `functions` (added when new).
    fn functions_of(&mut self, recording: &Recording, stack: u32) -> (usize, Vec<usize>) {
        let locations = recording.stacks.get(stack as usize).map_or(&[][..], Vec::as_slice);
        // Innermost first: a location's symbols are outermost first.
        let mut all: Vec<usize> = locations
            .iter()
            .filter_map(|&location| recording.locations.get(location as usize))
            .flat_map(|location| location.symbols.iter().rev())
            .map(|symbol| self.function(&function_name(symbol), kind_label(symbol)))
            .collect();
        if all.is_empty() {
            all.push(self.function(NO_STACK.0, NO_STACK.1));
        }
        let innermost = all[0];
        let mut seen = Vec::with_capacity(all.len());
        all.retain(|function| {
            let new = !seen.contains(function);
            seen.push(*function);
            new
        });
        (innermost, all)
    }

    /// The index of the function `name` of `kind`, added with no weight if new.
    fn function(&mut self, name: &str, kind: &'static str) -> usize {
        if let Some(&index) = self.index.get(&(name.to_owned(), kind)) {
            return index;
        }
        self.functions.push(HotFunction {
            name: name.to_owned(),
            kind,
            self_weight: 0,
            total_weight: 0,
            processes: BTreeMap::new(),
        });
        self.index.insert((name.to_owned(), kind), self.functions.len() - 1);
        self.functions.len() - 1
    }

    /// Adds the functions and weights of `other` (a later window) to these.
    pub fn add(&mut self, other: &Self) {
        self.total += other.total;
        self.weight = other.weight;
        self.duration_ns += other.duration_ns;
        for function in &other.functions {
            let index = self.function(&function.name, function.kind);
            let mine = &mut self.functions[index];
            mine.self_weight += function.self_weight;
            mine.total_weight += function.total_weight;
            for (pid, comm) in &function.processes {
                mine.processes.entry(*pid).or_insert_with(|| comm.clone());
            }
        }
    }

    /// The functions whose name or processes contain `filter` (ignoring case; all when empty),
    /// heaviest first by `sort`, then by the other weight, then by name.
    pub fn rows(&self, sort: SortBy, filter: &str) -> Vec<&HotFunction> {
        let filter = filter.to_lowercase();
        let mut rows: Vec<&HotFunction> =
            self.functions.iter().filter(|function| function.matches(&filter)).collect();
        let key = |function: &HotFunction| match sort {
            SortBy::SelfWeight => (function.self_weight, function.total_weight),
            SortBy::TotalWeight => (function.total_weight, function.self_weight),
        };
        rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
        rows
    }

    /// A weight's share of the total, in percent.
    pub fn share(&self, weight: u64) -> f64 {
        if self.total == 0 { 0.0 } else { weight as f64 * 100.0 / self.total as f64 }
    }

    /// What the total is: `1985 samples`, `3.2 s of thread time`.
    pub fn describe_total(&self) -> String {
        match self.weight {
            Weight::Samples => format!("{} samples", self.total),
            Weight::Bytes => format!("{} bytes", self.total),
            Weight::OffCpuNs | Weight::WallNs => format!("{:.1} s of thread time", self.total as f64 / 1e9),
        }
    }

    /// The plain table of the `limit` heaviest functions by `sort`, under a line that says what
    /// it covers: `profiler top: PID 1234 · last 1.0 s · 99 samples`.
    pub fn to_text(&self, title: &str, sort: SortBy, limit: usize) -> String {
        let mut text = format!(
            "profiler top: {title} · last {:.1} s · {}\n",
            self.duration_ns as f64 / 1e9,
            self.describe_total()
        );
        let _ = writeln!(text, "{:>6} {:>7}  {:<6}  {:<24}  FUNCTION", "SELF%", "TOTAL%", "KIND", "PROCESS");
        for function in self.rows(sort, "").into_iter().take(limit) {
            let _ = writeln!(
                text,
                "{:>6.1} {:>7.1}  {:<6}  {:<24}  {}",
                self.share(function.self_weight),
                self.share(function.total_weight),
                function.kind,
                clip(&function.process_label(), 24),
                function.name
            );
        }
        text
    }
}

impl HotFunction {
    /// Its process (`app (1234)`), or how many (`[3 processes]`).
    pub fn process_label(&self) -> String {
        match self.processes.len() {
            1 => self.processes.iter().map(|(pid, comm)| format!("{comm} ({})", pid.0)).collect(),
            n => format!("[{n} processes]"),
        }
    }

    /// Whether its name or one of its processes' names contains `filter`, already lowercase.
    fn matches(&self, filter: &str) -> bool {
        filter.is_empty()
            || self.name.to_lowercase().contains(filter)
            || self.processes.values().any(|comm| comm.to_lowercase().contains(filter))
    }
}

/// A function's name as `top` shows it: a script's function with its file but not its line, so
/// that a function is one row; others as named (names are made printable as they are read).
fn function_name(symbol: &Symbol) -> String {
    match (&symbol.kind, &symbol.source) {
        (SymbolKind::Script, Some(source)) => format!("{} ({})", symbol.name, source.file),
        _ => symbol.name.clone(),
    }
}

/// `text` cut to `width` characters, the last one an ellipsis when cut.
pub fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(width.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Location, Meta, Sample, SourceLine, ThreadState, Tid};

    fn location(name: &str, kind: SymbolKind) -> Location {
        Location { module: None, address: 0, symbols: vec![Symbol::new(name, kind)] }
    }

    fn sample(pid: u32, comm: u32, stack: u32, weight: u64) -> Sample {
        Sample { time_ns: 0, pid: Tgid(pid), tid: Tid(pid), comm, stack, weight, state: ThreadState::OnCpu }
    }

    /// main → run → {hot (6), warm (3), sys_read in the kernel under warm (1)}; `recurse` twice in
    /// one stack; a Python function at two lines; one sample without a stack; two processes.
    fn recording() -> Recording {
        let inlined = Location {
            module: None,
            address: 0,
            symbols: vec![
                Symbol::new("warm", SymbolKind::Function),
                Symbol::new("push", SymbolKind::Inlined),
            ],
        };
        let script = |line| Location {
            module: None,
            address: 0,
            symbols: vec![
                Symbol::new("handle", SymbolKind::Script)
                    .at(Some(SourceLine { file: "app.py".into(), line })),
            ],
        };
        Recording {
            meta: Meta { duration_ns: 2_000_000_000, ..Meta::default() },
            locations: vec![
                location("main", SymbolKind::Function),    // 0
                location("run", SymbolKind::Function),     // 1
                location("hot", SymbolKind::Function),     // 2
                inlined,                                   // 3: warm with push inlined
                location("sys_read", SymbolKind::Kernel),  // 4
                location("recurse", SymbolKind::Function), // 5
                script(10),                                // 6
                script(20),                                // 7
            ],
            stacks: vec![
                vec![2, 1, 0],
                vec![3, 1, 0],
                vec![4, 3, 1, 0],
                vec![5, 5, 1, 0],
                vec![6, 1, 0],
                vec![7, 1, 0],
                vec![],
            ],
            comms: vec!["app".into(), "other".into()],
            samples: vec![
                sample(10, 0, 0, 5),
                sample(20, 1, 0, 1),
                sample(10, 0, 1, 3),
                sample(10, 0, 2, 1),
                sample(10, 0, 3, 2),
                sample(10, 0, 4, 1),
                sample(10, 0, 5, 1),
                sample(10, 0, 6, 1),
            ],
            ..Recording::default()
        }
    }

    fn row<'a>(table: &'a HotFunctions, name: &str) -> &'a HotFunction {
        table.functions.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn self_and_total_weights_by_function() {
        let table = HotFunctions::of(&recording());
        assert_eq!(table.total, 15);
        let weights = |name| (row(&table, name).self_weight, row(&table, name).total_weight);
        assert_eq!(weights("hot"), (6, 6));
        // The inlined function is the innermost frame; the function it was inlined into is in
        // the stack.
        assert_eq!(weights("push"), (3, 4));
        assert_eq!(weights("warm"), (0, 4));
        assert_eq!(weights("sys_read"), (1, 1));
        // Counted once per sample however deep it recurses.
        assert_eq!(weights("recurse"), (2, 2));
        // One row per script function, whatever its line.
        assert_eq!(weights("handle (app.py)"), (2, 2));
        assert_eq!(weights("run"), (0, 14));
        assert_eq!(weights("main"), (0, 14));
        assert_eq!(weights("[no stack]"), (1, 1));
        assert_eq!(row(&table, "sys_read").kind, "kernel");
        assert_eq!(row(&table, "push").kind, "native");
        assert_eq!(row(&table, "handle (app.py)").kind, "Python");
        assert_eq!(table.share(6), 40.0);
    }

    #[test]
    fn processes_are_named_or_counted() {
        let table = HotFunctions::of(&recording());
        assert_eq!(row(&table, "hot").process_label(), "[2 processes]");
        assert_eq!(row(&table, "sys_read").process_label(), "app (10)");
    }

    #[test]
    fn rows_sort_and_filter() {
        let table = HotFunctions::of(&recording());
        let names = |rows: Vec<&HotFunction>| rows.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let by_self = names(table.rows(SortBy::SelfWeight, ""));
        assert_eq!(by_self[..4], ["hot", "push", "handle (app.py)", "recurse"]);
        let by_total = names(table.rows(SortBy::TotalWeight, ""));
        assert_eq!(by_total[..3], ["main", "run", "hot"]);
        assert_eq!(names(table.rows(SortBy::SelfWeight, "PUS")), ["push"]);
        // A process's name matches every function it ran.
        assert_eq!(names(table.rows(SortBy::SelfWeight, "other")), ["hot", "main", "run"]);
    }

    #[test]
    fn windows_add_up() {
        let window = HotFunctions::of(&recording());
        let mut since_start = HotFunctions::default();
        since_start.add(&window);
        since_start.add(&window);
        assert_eq!(since_start.total, 30);
        assert_eq!(since_start.duration_ns, 4_000_000_000);
        assert_eq!((row(&since_start, "hot").self_weight, row(&since_start, "run").total_weight), (12, 28));
        assert_eq!(since_start.functions.len(), window.functions.len());
    }

    #[test]
    fn plain_table() {
        let text = HotFunctions::of(&recording()).to_text("PID 10", SortBy::SelfWeight, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "profiler top: PID 10 · last 2.0 s · 15 samples");
        assert_eq!(lines[1], " SELF%  TOTAL%  KIND    PROCESS                   FUNCTION");
        assert_eq!(lines[2], "  40.0    40.0  native  [2 processes]             hot");
        assert_eq!(lines[3], "  20.0    26.7  native  app (10)                  push");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn kinds_by_language_then_by_kind() {
        let at = |name: &str, kind, file: &str| {
            kind_label(&Symbol::new(name, kind).at(Some(SourceLine { file: file.into(), line: 1 })))
        };
        assert_eq!(at("Shares.alpha", SymbolKind::Jit, "Shares.java"), "Java");
        assert_eq!(at("Shares.beta", SymbolKind::Function, "Shares.java"), "Java");
        assert_eq!(at("handler", SymbolKind::Script, "/srv/app/server.mjs"), "JavaScript");
        assert_eq!(at("work", SymbolKind::Function, "/src/work.c"), "native");
        assert_eq!(at("eval", SymbolKind::Script, "script"), "script");
        assert_eq!(kind_label(&Symbol::new("schedule", SymbolKind::Kernel)), "kernel");
        assert_eq!(kind_label(&Symbol::new("LazyCompile:~f", SymbolKind::Jit)), "JIT");
    }

    #[test]
    fn clipping() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
