//! The terminal side of the live view: taking and always giving back the
//! terminal, reading keys, and drawing a [`Snapshot`] with ratatui. With
//! `--opcodes` a row of the table is selected (j/k, ↑/↓) and the
//! instructions it was at as the leaf are shown in a panel under the table.
//!
//! The terminal is restored on every way out: the guard's `Drop` (a
//! return, an error, a panic unwinding this thread) and a panic hook (a
//! panic in another thread). Raw mode turns Ctrl-C into a key, which quits
//! like `q`; SIGTERM and SIGHUP are noticed between two redraws.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::aggregate::Ended;
use super::collector::Shared;
use super::view::{OP_BAR, Row, Snapshot, SortBy, Trend, Trends, ViewOptions, op_lines, snapshot};

/// The smallest screen the view draws on; a smaller one gets a message.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;

/// Redraws per second at the start (`+` and `-` change it).
const DEFAULT_REFRESH: Duration = Duration::from_millis(100);
const FASTEST_REFRESH: Duration = Duration::from_millis(50);
const SLOWEST_REFRESH: Duration = Duration::from_secs(2);

/// The most rows computed for one screen.
const ROW_LIMIT: usize = 500;

/// The instruction panel's lines (its title included), when they fit; it
/// shrinks to the screen, and is left out below `PANEL_MIN`.
const PANEL_HEIGHT: usize = 12;
const PANEL_MIN: usize = 3;

/// The terminal is ours (raw mode, alternate screen): restore it.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Give the terminal back (idempotent): cursor shown, main screen, cooked
/// mode, standard error (and what was held of it). Errors are ignored: a
/// terminal that is gone needs nothing.
pub fn restore_terminal() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let mut out = io::stdout();
        let _ = execute!(out, cursor::Show, terminal::LeaveAlternateScreen);
        let _ = out.flush();
        let _ = terminal::disable_raw_mode();
    }
    super::stderr::release();
}

/// Raw mode and the alternate screen for as long as it lives.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_terminal();
                previous(info);
            }));
        });
        terminal::enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let guard = TerminalGuard;
        execute!(
            io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide,
            terminal::Clear(terminal::ClearType::All)
        )?;
        super::stderr::hold()?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// What a key asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Nothing,
    /// Draw again now.
    Redraw,
    /// Forget the counts.
    Reset,
    /// Leave the view (and stop sampling).
    Quit,
}

/// The view's own state: what the keys change.
#[derive(Debug, Clone)]
pub struct Ui {
    pub opts: ViewOptions,
    pub help: bool,
    /// The filter being typed, when `/` was pressed.
    pub input: Option<String>,
    /// The display is frozen (sampling goes on).
    pub paused: bool,
    pub trends: bool,
    pub show_threads: bool,
    pub refresh: Duration,
    /// Sampling has ended: the final view, which Enter and Esc also leave.
    pub ended: bool,
    /// The thread `t` returns to.
    last_thread: Option<u64>,
    /// `--opcodes`: a row is selected and its instructions shown.
    pub opcodes: bool,
    /// The selected row's place in the table.
    pub selected: usize,
    /// The row chosen with j/k (its key), which the selection follows when
    /// the table is sorted again; `None`: the top row until one is chosen.
    chosen: Option<u32>,
    /// The first row on screen, so that the selection stays on it.
    scroll: usize,
}

impl Default for Ui {
    fn default() -> Self {
        Ui {
            opts: ViewOptions {
                limit: ROW_LIMIT,
                ..ViewOptions::default()
            },
            help: false,
            input: None,
            paused: false,
            trends: true,
            show_threads: true,
            refresh: DEFAULT_REFRESH,
            ended: false,
            last_thread: None,
            opcodes: false,
            selected: 0,
            chosen: None,
            scroll: 0,
        }
    }
}

impl Ui {
    /// With `--opcodes`: rows are selected and their instructions counted
    /// and shown.
    pub fn with_opcodes(mut self, on: bool) -> Self {
        self.opcodes = on;
        self.opts.opcodes = on;
        self
    }

    /// A new screen's rows (their keys, in order): the selection stays on
    /// the row chosen while it is in the table, else at its place.
    pub fn follow(&mut self, rows: &[u32]) {
        let last = rows.len().saturating_sub(1);
        match self.chosen.and_then(|k| rows.iter().position(|&r| r == k)) {
            Some(i) => self.selected = i,
            None => {
                self.selected = self.selected.min(last);
                if self.chosen.is_some() {
                    self.chosen = rows.get(self.selected).copied();
                }
            }
        }
    }

    /// Move the selection one row down or up in `rows`.
    fn select(&mut self, rows: &[u32], down: bool) {
        self.follow(rows);
        let Some(last) = rows.len().checked_sub(1) else {
            return;
        };
        self.selected = if down {
            (self.selected + 1).min(last)
        } else {
            self.selected.saturating_sub(1)
        };
        self.chosen = rows.get(self.selected).copied();
    }

    /// Apply one key; `threads` are the thread ids, in list order, `rows`
    /// the keys of the table's rows, in order.
    pub fn key(&mut self, k: KeyEvent, threads: &[u64], rows: &[u32]) -> Command {
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(k.code, KeyCode::Char('c') | KeyCode::Char('d')) {
            return Command::Quit;
        }
        if ctrl && k.code == KeyCode::Char('l') {
            return Command::Redraw;
        }
        if let Some(text) = &mut self.input {
            match k.code {
                KeyCode::Enter => {
                    let t = std::mem::take(text);
                    self.opts.filter = (!t.is_empty()).then_some(t);
                    self.input = None;
                }
                KeyCode::Esc => self.input = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => return Command::Nothing,
            }
            return Command::Redraw;
        }
        if self.help {
            self.help = false;
            return Command::Redraw;
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return Command::Quit,
            KeyCode::Char('h') | KeyCode::Char('?') => self.help = true,
            KeyCode::Char('s') => self.opts.sort = self.opts.sort.next(),
            KeyCode::Char('S') => self.opts.sort = self.opts.sort.prev(),
            KeyCode::Char('t') => {
                self.opts.thread = match self.opts.thread {
                    Some(t) => {
                        self.last_thread = Some(t);
                        None
                    }
                    None => self
                        .last_thread
                        .filter(|t| threads.contains(t))
                        .or(threads.first().copied()),
                };
            }
            KeyCode::Left | KeyCode::Right => {
                // ALL, then each thread in turn, around.
                let n = threads.len() + 1;
                let at = match self.opts.thread {
                    None => 0,
                    Some(t) => threads.iter().position(|&x| x == t).map_or(0, |i| i + 1),
                };
                let to = if k.code == KeyCode::Right {
                    (at + 1) % n
                } else {
                    (at + n - 1) % n
                };
                self.opts.thread = if to == 0 { None } else { Some(threads[to - 1]) };
            }
            KeyCode::Char('/') => self.input = Some(String::new()),
            KeyCode::Char('c') => self.opts.filter = None,
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('r') => return Command::Reset,
            KeyCode::Char('x') => self.trends = !self.trends,
            KeyCode::Char('l') => self.show_threads = !self.show_threads,
            KeyCode::Char('+') | KeyCode::Char('=') => {
                self.refresh = (self.refresh / 2).max(FASTEST_REFRESH)
            }
            KeyCode::Char('-') => self.refresh = (self.refresh * 2).min(SLOWEST_REFRESH),
            KeyCode::Char('j') | KeyCode::Down if self.opcodes => self.select(rows, true),
            KeyCode::Char('k') | KeyCode::Up if self.opcodes => self.select(rows, false),
            KeyCode::Esc | KeyCode::Enter if self.opts.filter.is_some() => self.opts.filter = None,
            KeyCode::Esc | KeyCode::Enter if self.ended => return Command::Quit,
            _ => return Command::Nothing,
        }
        Command::Redraw
    }
}

/// Run the view until the user quits, sampling ends abruptly, or a signal
/// arrives. `stop` asks the sampling loop to stop.
pub fn run(shared: Arc<Shared>, stop: &dyn Fn()) -> io::Result<()> {
    let _guard = TerminalGuard::enter()?;
    let mut view = Screens::new(&shared)?;
    loop {
        if crate::sample::signals::received().is_some() {
            // SIGTERM or SIGHUP: the sampler stops too; leave now.
            return Ok(());
        }
        let now = Instant::now();
        if now >= view.next_draw && !view.show(&shared, now)? {
            return Ok(());
        }
        let wait = view.next_draw.saturating_duration_since(Instant::now());
        if !event::poll(wait)? {
            continue;
        }
        let quit = match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => view.key(k, &shared, stop)?,
            Event::Resize(..) => {
                view.next_draw = Instant::now();
                false
            }
            _ => false,
        };
        if quit {
            return Ok(());
        }
    }
}

/// What the view keeps from one screen to the next.
struct Screens {
    term: ratatui::Terminal<CrosstermBackend<io::Stdout>>,
    ui: Ui,
    trends: Trends,
    /// The last snapshot taken (kept while paused).
    snap: Option<Snapshot>,
    next_draw: Instant,
    /// The process the last snapshot was of.
    pid: Option<i32>,
}

impl Screens {
    fn new(shared: &Shared) -> io::Result<Self> {
        let term = ratatui::Terminal::new(CrosstermBackend::new(io::stdout()))?;
        let opcodes = shared.lock().opcodes.is_some();
        Ok(Screens {
            term,
            ui: Ui::default().with_opcodes(opcodes),
            trends: Trends::default(),
            snap: None,
            next_draw: Instant::now(),
            pid: None,
        })
    }

    /// Take a snapshot (unless paused) and draw it, the next screen due a
    /// refresh later. `false`: sampling stopped abruptly, the view is over.
    fn show(&mut self, shared: &Shared, now: Instant) -> io::Result<bool> {
        let ui = &mut self.ui;
        let (ended, fresh) = {
            let agg = shared.lock();
            let fresh = (!ui.paused || self.snap.is_none())
                .then(|| snapshot(&agg, &ui.opts, now, &mut self.trends));
            (agg.ended.map(|(_, how)| how), fresh)
        };
        if ended == Some(Ended::Stopped) {
            return Ok(false);
        }
        ui.ended = ended.is_some();
        if let Some(s) = fresh {
            // Another process: messages about it may have been printed
            // over the view; draw it all again.
            if self.pid.is_some_and(|p| p != s.pid) {
                self.term.clear()?;
            }
            self.pid = Some(s.pid);
            ui.follow(&row_keys(&s));
            self.snap = Some(s);
        }
        if let Some(s) = &self.snap {
            self.term.draw(|f| draw(f, ui, s))?;
        }
        self.next_draw = now + ui.refresh;
        Ok(true)
    }

    /// Do what key `k` asks. `true`: the user quit (and sampling is asked
    /// to stop).
    fn key(&mut self, k: KeyEvent, shared: &Shared, stop: &dyn Fn()) -> io::Result<bool> {
        let threads: Vec<u64> = self
            .snap
            .as_ref()
            .map(|s| s.threads.iter().map(|t| t.tid).collect())
            .unwrap_or_default();
        let rows = self.snap.as_ref().map(row_keys).unwrap_or_default();
        match self.ui.key(k, &threads, &rows) {
            Command::Quit => {
                stop();
                return Ok(true);
            }
            Command::Reset => {
                let mut agg = shared.lock();
                if agg.ended.is_none() {
                    agg.reset(Instant::now());
                }
                drop(agg);
                self.ui.paused = false;
                self.next_draw = Instant::now();
            }
            Command::Redraw => {
                if k.code == KeyCode::Char('l') && k.modifiers.contains(KeyModifiers::CONTROL) {
                    self.term.clear()?;
                }
                self.next_draw = Instant::now();
            }
            Command::Nothing => {}
        }
        Ok(false)
    }
}

/// The keys of a screen's rows, in order.
fn row_keys(s: &Snapshot) -> Vec<u32> {
    s.rows.iter().map(|r| r.key).collect()
}

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draw one screen.
pub fn draw(f: &mut Frame<'_>, ui: &mut Ui, s: &Snapshot) {
    let area = f.area();
    let lines = if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area.width, area.height)
    } else if ui.help {
        help(ui.opcodes)
    } else {
        screen(ui, s, area.width as usize, area.height as usize)
    };
    f.render_widget(Paragraph::new(lines), area);
}

fn too_small(w: u16, h: u16) -> Vec<Line<'static>> {
    vec![
        Line::styled("Terminal too small", BOLD),
        Line::raw(format!(
            "{w}x{h}: the live view needs {MIN_WIDTH}x{MIN_HEIGHT}."
        )),
        Line::raw("Enlarge the window, or press q to quit."),
    ]
}

fn help(opcodes: bool) -> Vec<Line<'static>> {
    let select = if opcodes {
        "select a row: the instructions it ran show under the table"
    } else {
        "with --opcodes: select a row and see the instructions it ran"
    };
    let keys: &[(&str, &str)] = &[
        ("s / S", "next / previous sort key"),
        ("j/k or ↑/↓", select),
        ("t", "all threads / one thread"),
        ("← / →", "previous / next thread (all threads, then each)"),
        (
            "/",
            "filter rows by function or file (Enter applies, Esc cancels)",
        ),
        ("c", "clear the filter"),
        (
            "p or space",
            "pause / resume the display (sampling goes on)",
        ),
        ("r", "reset the counts"),
        ("x", "trend marks on / off (▲ share rising, ▼ falling)"),
        ("l", "thread list on / off"),
        ("+ / -", "redraw faster / slower"),
        ("Ctrl-L", "redraw the whole screen"),
        ("h or ?", "this help (any key closes it)"),
        (
            "q or Ctrl-C",
            "quit (the profile's file, if any, is written)",
        ),
    ];
    let mut v = vec![Line::styled("tachyon live view: keys", BOLD), Line::raw("")];
    for (k, what) in keys {
        v.push(Line::from(vec![
            Span::styled(format!("  {k:<12}"), BOLD),
            Span::raw(*what),
        ]));
    }
    v.push(Line::raw(""));
    v.push(Line::styled("Press any key to close this help.", DIM));
    v
}

fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

fn hz(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} kHz", v / 1000.0)
    } else {
        format!("{v:.1} Hz")
    }
}

fn pct_of(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 * 100.0 / d as f64
    }
}

/// Cut `s` to `w` characters, marking the cut.
fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Keep the end of `s` (a path's file name matters most) in `w` characters.
fn fit_end(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let mut t = String::from("…");
    t.extend(s.chars().skip(n - w.saturating_sub(1)));
    t
}

/// A thread's label: its name when known, else its id.
fn thread_label(s: &Snapshot, tid: u64) -> String {
    match s.threads.iter().find(|t| t.tid == tid) {
        Some(t) => match &t.name {
            Some(name) => format!("{tid} {name}"),
            None => tid.to_string(),
        },
        None => tid.to_string(),
    }
}

/// The whole screen, `h` lines of `w` columns: the header, the thread
/// list and the table, the instruction panel (`--opcodes`), the footer.
fn screen(ui: &mut Ui, s: &Snapshot, w: usize, h: usize) -> Vec<Line<'static>> {
    let mut v = header(ui, s);
    // The instruction panel, then the thread list, when they fit beside at
    // least a few rows.
    let panel_h = panel_height(ui, h, v.len());
    if ui.show_threads && !s.threads.is_empty() {
        let room = h.saturating_sub(v.len() + 1 + 1 + TABLE_MIN + FOOTER + panel_h + 1);
        v.extend(thread_list(ui, s, w, room));
    }
    v.push(Line::styled("─".repeat(w), DIM));
    let cols = Columns::for_width(w);
    v.push(table_head(ui, &cols));
    let body = h.saturating_sub(v.len() + FOOTER + panel_h);
    let selected = keep_selection_visible(ui, s.rows.len(), body);
    let first = if ui.opcodes { ui.scroll } else { 0 };
    for (i, r) in s.rows.iter().enumerate().skip(first).take(body) {
        let line = table_row(ui, s, r, &cols);
        v.push(if selected == Some(i) {
            line.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            line
        });
    }
    while v.len() + FOOTER + panel_h < h {
        v.push(Line::raw(""));
    }
    if panel_h > 0 {
        v.extend(panel(selected.and_then(|i| s.rows.get(i)), w, panel_h));
    }
    v.push(Line::styled(
        "nsamples: self/cumulative (self: executing; cumulative: on the stack)",
        DIM,
    ));
    v.push(status_line(ui));
    v
}

/// The footer's lines: the legend and the status line.
const FOOTER: usize = 2;
/// The fewest table rows the panel and the thread list leave.
const TABLE_MIN: usize = 5;

/// The header: the title line, the sampling rate and efficiency, the
/// threads' states, the functions and the top three, and a banner once
/// profiling ended.
fn header(ui: &Ui, s: &Snapshot) -> Vec<Line<'static>> {
    let mut v = vec![title_line(ui, s)];
    v.extend(rate_lines(s));
    v.push(states_line(s));
    v.push(Line::raw(format!(
        "Functions: {} total │ {} executing │ {} on stack only │ {} shown",
        s.functions,
        s.executing,
        s.functions - s.executing,
        s.shown
    )));
    v.push(top_line(s));
    v.extend(ended_line(s));
    v
}

fn sep(label: &str) -> Span<'static> {
    Span::styled(label.to_string(), DIM)
}

/// `tachyon live │ PID │ Thread │ Uptime │ Interval │ Display`.
fn title_line(ui: &Ui, s: &Snapshot) -> Line<'static> {
    let thread = match ui.opts.thread {
        None => "ALL".to_string(),
        Some(t) => {
            let i = s
                .threads
                .iter()
                .position(|x| x.tid == t)
                .map_or(0, |i| i + 1);
            format!("{} ({i}/{})", thread_label(s, t), s.threads.len())
        }
    };
    Line::from(vec![
        Span::styled("tachyon live", BOLD.fg(Color::Cyan)),
        sep(" │ "),
        Span::raw(format!("PID: {}", s.pid)),
        sep(" │ "),
        Span::styled(format!("Thread: {thread}"), BOLD),
        sep(" │ "),
        Span::raw(format!("Uptime: {}", uptime(s.elapsed))),
        sep(" │ "),
        Span::raw(format!("Interval: {}µs", s.interval_us)),
        sep(" │ "),
        Span::raw(format!(
            "Display: {:.0} Hz{}",
            1.0 / ui.refresh.as_secs_f64(),
            if ui.paused { " (paused)" } else { "" }
        )),
    ])
}

/// `Samples:` (the rate against the requested one) and `Efficiency:`.
fn rate_lines(s: &Snapshot) -> [Line<'static>; 2] {
    let requested = if s.interval_us > 0 {
        1e6 / s.interval_us as f64
    } else {
        0.0
    };
    let rate = s.rate_hz();
    let samples = Line::raw(format!(
        "Samples: {:>9} total │ rate {} of {} requested ({:.1}%)",
        s.good + s.failed,
        hz(rate),
        hz(requested),
        if requested > 0.0 {
            rate * 100.0 / requested
        } else {
            0.0
        }
    ));
    let attempts = s.good + s.failed;
    let efficiency = Line::from(vec![
        Span::raw("Efficiency: "),
        Span::styled(
            format!("{:.2}% good", pct_of(s.good, attempts)),
            Style::new().fg(Color::Green),
        ),
        Span::raw(", "),
        Span::styled(
            format!("{:.2}% failed", pct_of(s.failed, attempts)),
            Style::new().fg(Color::Red),
        ),
    ]);
    [samples, efficiency]
}

/// `Threads:`: the share of thread samples in each state.
fn states_line(s: &Snapshot) -> Line<'static> {
    let st = &s.states;
    if s.tasks {
        return Line::raw(format!(
            "Threads: GIL and exception states not read with --async-aware (task stacks) │ {:5.1}% in GC",
            pct_of(st.gc, st.seen),
        ));
    }
    // 3.11 and 3.12 do not say a thread waits for the GIL: n/a, not 0%.
    let waiting = if s.gil_wait {
        format!("{:5.1}%", pct_of(st.waiting, st.seen))
    } else {
        "  n/a".to_string()
    };
    Line::raw(format!(
        "Threads: {:5.1}% holding GIL │ {:5.1}% released GIL │ {waiting} waiting for GIL │ {:5.1}% in exception │ {:5.1}% in GC",
        pct_of(st.gil, st.seen),
        pct_of(st.seen - st.gil.min(st.seen), st.seen),
        pct_of(st.exception, st.seen),
        pct_of(st.gc, st.seen),
    ))
}

/// `Top 3:`: the functions with the most self samples.
fn top_line(s: &Snapshot) -> Line<'static> {
    let mut top = vec![Span::raw("Top 3: ")];
    for (i, (name, n)) in s.top.iter().enumerate() {
        if i > 0 {
            top.push(sep(" │ "));
        }
        top.push(Span::styled(
            format!("{}. {} ({:.1}%)", i + 1, fit(name, 30), s.pct(*n)),
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(top)
}

/// The banner once profiling ended by itself.
fn ended_line(s: &Snapshot) -> Option<Line<'static>> {
    let why = match s.ended {
        Some(Ended::TargetExited) => "the target exited",
        Some(Ended::Duration) => "the duration is over",
        _ => return None,
    };
    Some(Line::styled(
        format!("PROFILING COMPLETE: {why}. Final results below; q (or Enter) quits."),
        BOLD.fg(Color::Green),
    ))
}

/// The instruction panel's height below a header of `used` lines: 0 when
/// it is off or would not fit beside a few table rows.
fn panel_height(ui: &Ui, h: usize, used: usize) -> usize {
    if !ui.opcodes {
        return 0;
    }
    let room = h
        .saturating_sub(used + 1 + 1 + TABLE_MIN + FOOTER)
        .min(PANEL_HEIGHT);
    if room >= PANEL_MIN { room } else { 0 }
}

/// The thread list in at most `room` lines (and 6 threads), the selected
/// thread kept in it; nothing when there is no room.
fn thread_list(ui: &Ui, s: &Snapshot, w: usize, room: usize) -> Vec<Line<'static>> {
    let shown = s.threads.len().min(room).min(6);
    if shown == 0 {
        return Vec::new();
    }
    let mut v = vec![Line::styled(
        format!("Thread list ({}):", s.threads.len()),
        DIM,
    )];
    let sel = ui
        .opts
        .thread
        .and_then(|t| s.threads.iter().position(|x| x.tid == t))
        .unwrap_or(0);
    let first = sel.saturating_sub(shown - 1);
    for t in s.threads.iter().skip(first).take(shown) {
        let chosen = ui.opts.thread == Some(t.tid);
        let mark = if chosen { "▶" } else { " " };
        let name = t.name.as_deref().unwrap_or("-");
        let text = format!(
            " {mark} {:<10} {:<24} {:5.1}% of thread samples  {}",
            t.tid,
            fit(name, 24),
            pct_of(t.samples, s.thread_samples),
            t.state
        );
        let style = if chosen { BOLD } else { Style::new() };
        v.push(Line::styled(fit(&text, w), style));
    }
    v
}

/// The table's columns for a screen `w` wide: the time columns go first
/// when it is narrow; function and file share what is left.
struct Columns {
    times: bool,
    func_w: usize,
    file_w: usize,
}

impl Columns {
    fn for_width(w: usize) -> Self {
        let times = w >= 100;
        let fixed: usize = if times {
            15 + 7 + 10 + 7 + 10
        } else {
            15 + 7 + 7
        };
        let rest = w.saturating_sub(fixed + 3);
        let func_w = (rest / 2).clamp(10, 40);
        Columns {
            times,
            func_w,
            file_w: rest.saturating_sub(func_w + 1),
        }
    }
}

/// The table's heading, the sort column marked.
fn table_head(ui: &Ui, cols: &Columns) -> Line<'static> {
    let head = |label: &str, width: usize, col: SortBy| -> Span<'static> {
        if ui.opts.sort == col {
            let text = format!("{:>width$}", format!("▼{label}"));
            Span::styled(text, BOLD.fg(Color::Cyan))
        } else {
            Span::styled(format!("{label:>width$}"), BOLD)
        }
    };
    let mut hs = vec![
        head("nsamples", 15, SortBy::SelfSamples),
        head("%", 7, SortBy::SelfPct),
    ];
    if cols.times {
        hs.push(head("tottime", 10, SortBy::SelfTime));
    }
    hs.push(head("%", 7, SortBy::CumPct));
    if cols.times {
        hs.push(head("cumtime", 10, SortBy::CumTime));
    }
    let func_w = cols.func_w;
    hs.push(Span::styled(
        format!("   {:<func_w$} {}", "function", "file:line"),
        BOLD,
    ));
    Line::from(hs)
}

/// The selected row (with `--opcodes`), scrolling the table so that it
/// is among the `body` rows shown.
fn keep_selection_visible(ui: &mut Ui, rows: usize, body: usize) -> Option<usize> {
    let sel = ui
        .opcodes
        .then(|| ui.selected.min(rows.saturating_sub(1)))?;
    let mut first = ui.scroll.min(rows.saturating_sub(body));
    if sel < first {
        first = sel;
    } else if body > 0 && sel >= first + body {
        first = sel + 1 - body;
    }
    ui.scroll = first;
    Some(sel)
}

/// One row of the table.
fn table_row(ui: &Ui, s: &Snapshot, r: &Row, cols: &Columns) -> Line<'static> {
    let mut spans = vec![
        Span::styled(
            format!("{:>15}", format!("{}/{}", r.self_samples, r.cum_samples)),
            Style::new().fg(Color::Cyan),
        ),
        Span::raw(format!("{:>7.1}", s.pct(r.self_samples))),
    ];
    if cols.times {
        spans.push(Span::raw(format!("{:>10.3}", s.seconds(r.self_samples))));
    }
    spans.push(Span::raw(format!("{:>7.1}", s.pct(r.cum_samples))));
    if cols.times {
        spans.push(Span::raw(format!("{:>10.3}", s.seconds(r.cum_samples))));
    }
    let (mark, style) = match (ui.trends, r.trend) {
        (true, Trend::Up) => ("▲", Style::new().fg(Color::Red)),
        (true, Trend::Down) => ("▼", Style::new().fg(Color::Green)),
        _ => (" ", Style::new()),
    };
    spans.push(Span::styled(format!(" {mark} "), style));
    let func_w = cols.func_w;
    spans.push(Span::styled(
        format!("{:<func_w$} ", fit(&r.func, func_w)),
        Style::new().fg(Color::Yellow),
    ));
    spans.push(Span::styled(
        fit_end(&format!("{}:{}", r.file, r.line), cols.file_w),
        DIM,
    ));
    Line::from(spans)
}

/// The last line: the filter being typed, or the filter and pause marks,
/// the sort and the keys.
fn status_line(ui: &Ui) -> Line<'static> {
    if let Some(text) = &ui.input {
        return Line::from(vec![
            Span::styled("Filter: ", BOLD),
            Span::raw(format!("{text}_")),
            Span::styled("   (Enter applies, Esc cancels)", DIM),
        ]);
    }
    let mut spans = Vec::new();
    if let Some(fl) = &ui.opts.filter {
        spans.push(Span::styled(
            format!("[Filter: {fl} (c clears)] "),
            Style::new().fg(Color::Yellow),
        ));
    }
    if ui.paused {
        spans.push(Span::styled("[PAUSED] ", Style::new().fg(Color::Red)));
    }
    spans.push(Span::styled(
        format!("Sort: {}", ui.opts.sort.label()),
        BOLD,
    ));
    spans.push(Span::styled(
        if ui.opcodes {
            " │ j/k row  s/S sort  t thread  ←→ threads  / filter  p pause  r reset  h help  q quit"
        } else {
            " │ s/S sort  t thread  ←→ threads  / filter  p pause  r reset  h help  q quit"
        },
        DIM,
    ));
    Line::from(spans)
}

/// The instruction panel of the selected row, `h` lines: a title, then
/// the instructions it was at as the leaf, each with its bar, share of the
/// row's samples with an instruction and samples.
fn panel(row: Option<&Row>, w: usize, h: usize) -> Vec<Line<'static>> {
    let rule = |text: String| -> Line<'static> {
        let n = text.chars().count();
        let text = format!("{text}{}", "─".repeat(w.saturating_sub(n)));
        Line::styled(fit(&text, w), BOLD.fg(Color::Cyan))
    };
    let mut v = Vec::with_capacity(h);
    match row {
        None => {
            v.push(rule("─── Opcodes ".into()));
            v.push(Line::styled(
                fit("  No row to select (j/k or ↑/↓ select one).", w),
                DIM,
            ));
        }
        Some(r) => {
            let at = fit_end(&format!("{}:{}", r.file, r.line), 50);
            let with = r.op_samples();
            v.push(rule(format!(
                "─── Opcodes of {} at {at} ({with} of {} self samples) ",
                fit(&r.func, 30),
                r.self_samples
            )));
            let (lines, more) = op_lines(r, h.saturating_sub(1));
            if lines.is_empty() && more == 0 {
                v.push(Line::styled(
                    fit(
                        &format!(
                            "  No instruction sampled for {} yet: it was not the leaf, or its instruction could not be read.",
                            r.func
                        ),
                        w,
                    ),
                    DIM,
                ));
            }
            let name_w = w.saturating_sub(2 + OP_BAR + 3 + 7 + 10).min(48);
            for l in &lines {
                let bar = format!(
                    "{}{}",
                    "█".repeat(l.filled),
                    "░".repeat(OP_BAR.saturating_sub(l.filled))
                );
                let color = if l.op.specialised {
                    Color::Magenta
                } else {
                    Color::Yellow
                };
                v.push(Line::from(vec![
                    Span::styled(format!("  [{bar}] "), Style::new().fg(Color::Cyan)),
                    Span::styled(
                        format!("{:<name_w$}", fit(&l.op.name, name_w)),
                        Style::new().fg(color),
                    ),
                    Span::raw(format!(" {:>5.1}% {:>9}", l.pct, l.op.samples)),
                ]));
            }
            if more > 0 {
                v.push(Line::styled(
                    format!(
                        "  … and {more} more instruction{}",
                        if more == 1 { "" } else { "s" }
                    ),
                    DIM,
                ));
            }
        }
    }
    v.truncate(h);
    while v.len() < h {
        v.push(Line::raw(""));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::view::{Row, ThreadRow};
    use ratatui::backend::TestBackend;

    fn snap() -> Snapshot {
        Snapshot {
            pid: 42,
            interval_us: 1000,
            elapsed: Duration::from_secs(3),
            good: 3000,
            failed: 0,
            denominator: 3000,
            thread_samples: 3010,
            gil_wait: true,
            states: Default::default(),
            tasks: false,
            functions: 1,
            executing: 1,
            shown: 1,
            top: vec![("checksum".into(), 2900)],
            rows: vec![Row {
                key: 0,
                ops: Vec::new(),
                func: "checksum".into(),
                file: "/tmp/pool.py".into(),
                line: 7,
                self_samples: 2900,
                cum_samples: 2900,
                trend: Trend::Up,
            }],
            threads: vec![
                ThreadRow {
                    tid: 10,
                    name: Some("MainThread".into()),
                    samples: 3000,
                    state: "holds GIL",
                },
                ThreadRow {
                    tid: 11,
                    name: None,
                    samples: 10,
                    state: "released GIL",
                },
            ],
            ended: Some(Ended::TargetExited),
        }
    }

    fn text(ui: &mut Ui, s: &Snapshot, w: u16, h: u16) -> String {
        let mut t = ratatui::Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, ui, s)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn a_screen_shows_header_rows_threads_and_the_end() {
        let mut ui = Ui::default();
        let t = text(&mut ui, &snap(), 140, 30);
        for want in [
            "PID: 42",
            "Thread: ALL",
            "2900/2900",
            "96.7",
            "checksum",
            "/tmp/pool.py:7",
            "▲",
            "MainThread",
            "PROFILING COMPLETE",
            "Sort: Self samples",
            "▼nsamples",
        ] {
            assert!(t.contains(want), "{want:?} missing from\n{t}");
        }
        // Narrow: no time columns, still the row.
        let t = text(&mut ui, &snap(), 70, 20);
        assert!(t.contains("checksum") && !t.contains("tottime"), "{t}");
    }

    #[test]
    fn task_samples_show_no_gil_shares() {
        let mut s = snap();
        s.states.seen = 3000;
        s.states.gc = 30;
        let t = text(&mut Ui::default(), &s, 160, 30);
        assert!(
            t.contains("0.0% holding GIL") && t.contains("100.0% released GIL"),
            "{t}"
        );
        s.tasks = true;
        let t = text(&mut Ui::default(), &s, 160, 30);
        let line = t.lines().find(|l| l.starts_with("Threads:")).unwrap_or("");
        assert!(!line.contains("GIL │"), "{t}");
        assert!(line.contains("not read with --async-aware"), "{t}");
        assert!(line.contains("1.0% in GC"), "{t}");
    }

    #[test]
    fn a_small_terminal_gets_a_message() {
        let t = text(&mut Ui::default(), &snap(), 30, 8);
        assert!(t.contains("Terminal too small"), "{t}");
        // The smallest accepted size draws the view.
        let t = text(&mut Ui::default(), &snap(), MIN_WIDTH, MIN_HEIGHT);
        assert!(t.contains("checksum"), "{t}");
    }

    fn press(ui: &mut Ui, code: KeyCode, threads: &[u64]) -> Command {
        ui.key(KeyEvent::new(code, KeyModifiers::NONE), threads, &[])
    }

    #[test]
    fn keys_sort_switch_threads_filter_and_quit() {
        let mut ui = Ui::default();
        let th = [10, 11];
        press(&mut ui, KeyCode::Char('s'), &th);
        assert_eq!(ui.opts.sort, SortBy::SelfPct);
        press(&mut ui, KeyCode::Char('S'), &th);
        press(&mut ui, KeyCode::Char('S'), &th);
        assert_eq!(ui.opts.sort, SortBy::CumTime);
        press(&mut ui, KeyCode::Right, &th);
        assert_eq!(ui.opts.thread, Some(10));
        press(&mut ui, KeyCode::Right, &th);
        press(&mut ui, KeyCode::Right, &th);
        assert_eq!(ui.opts.thread, None, "around to ALL");
        press(&mut ui, KeyCode::Left, &th);
        assert_eq!(ui.opts.thread, Some(11));
        press(&mut ui, KeyCode::Char('t'), &th);
        assert_eq!(ui.opts.thread, None);
        press(&mut ui, KeyCode::Char('t'), &th);
        assert_eq!(ui.opts.thread, Some(11), "t returns to the last thread");
        for c in "/chk".chars() {
            press(&mut ui, KeyCode::Char(c), &th);
        }
        // Typed keys are the filter's, not commands.
        assert_eq!(press(&mut ui, KeyCode::Char('q'), &th), Command::Redraw);
        press(&mut ui, KeyCode::Backspace, &th);
        press(&mut ui, KeyCode::Enter, &th);
        assert_eq!(ui.opts.filter.as_deref(), Some("chk"));
        press(&mut ui, KeyCode::Char('c'), &th);
        assert_eq!(ui.opts.filter, None);
        assert_eq!(press(&mut ui, KeyCode::Char('r'), &th), Command::Reset);
        assert_eq!(press(&mut ui, KeyCode::Enter, &th), Command::Nothing);
        ui.ended = true;
        assert_eq!(
            press(&mut ui, KeyCode::Enter, &th),
            Command::Quit,
            "final view"
        );
        assert_eq!(press(&mut ui, KeyCode::Char('q'), &th), Command::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(ui.key(ctrl_c, &th, &[]), Command::Quit);
    }

    /// `snap()` with `n` rows, `f0`..; row 0 ran two instructions.
    fn snap_with_rows(n: usize) -> Snapshot {
        use crate::live::view::OpCount;
        let mut s = snap();
        s.rows = (0..n)
            .map(|i| Row {
                key: 100 + i as u32,
                func: format!("f{i}"),
                file: "/tmp/w.py".into(),
                line: 10 + i as i32,
                self_samples: 1000 - i as u64,
                cum_samples: 1000,
                trend: Trend::Flat,
                ops: if i == 0 {
                    vec![
                        OpCount {
                            name: "BINARY_OP_ADD_INT (BINARY_OP)".into(),
                            specialised: true,
                            samples: 600,
                        },
                        OpCount {
                            name: "STORE_FAST".into(),
                            specialised: false,
                            samples: 200,
                        },
                    ]
                } else {
                    Vec::new()
                },
            })
            .collect();
        s
    }

    /// The screen's line holding `needle`.
    fn line_of<'a>(t: &'a str, needle: &str) -> &'a str {
        t.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} missing from\n{t}"))
    }

    #[test]
    fn with_opcodes_the_selected_row_gets_a_panel_of_its_instructions() {
        let s = snap_with_rows(3);
        let mut ui = Ui::default().with_opcodes(true);
        assert!(ui.opts.opcodes);
        let t = text(&mut ui, &s, 120, 30);
        let title = line_of(
            &t,
            "─── Opcodes of f0 at /tmp/w.py:10 (800 of 1000 self samples)",
        );
        assert!(title.ends_with('─'), "{t}");
        let add = line_of(&t, "BINARY_OP_ADD_INT (BINARY_OP)");
        assert!(
            add.contains(&format!("[{}]", "█".repeat(OP_BAR))) && add.contains("75.0%"),
            "{t}"
        );
        assert!(add.contains(" 600"), "{t}");
        let store = line_of(&t, "STORE_FAST");
        assert!(store.contains("25.0%") && store.contains("[██████░"), "{t}");
        // The panel sits under the table, above the footer.
        let lines: Vec<&str> = t.lines().collect();
        let at = |n: &str| lines.iter().position(|l| l.contains(n)).unwrap();
        assert!(at("f2") < at("─── Opcodes") && at("STORE_FAST") < at("nsamples: self"));
        assert!(t.contains("j/k row"), "{t}");

        // The selected row is drawn reversed, the others not.
        let mut term = ratatui::Terminal::new(TestBackend::new(120, 30)).unwrap();
        term.draw(|f| draw(f, &mut ui, &s)).unwrap();
        let buf = term.backend().buffer().clone();
        let reversed = |y: u16| buf[(20, y)].modifier.contains(Modifier::REVERSED);
        let y = |n: &str| at(n) as u16;
        assert!(reversed(y("f0 ")) && !reversed(y("f1 ")), "{t}");

        // Down to a row with no instruction: the empty state.
        let keys: Vec<u32> = s.rows.iter().map(|r| r.key).collect();
        let down = KeyEvent::new(KeyCode::Down, KeyModifiers::NONE);
        assert_eq!(ui.key(down, &[], &keys), Command::Redraw);
        let t = text(&mut ui, &s, 120, 30);
        line_of(
            &t,
            "─── Opcodes of f1 at /tmp/w.py:11 (0 of 999 self samples)",
        );
        line_of(&t, "No instruction sampled for f1 yet");
        assert!(!t.contains("STORE_FAST"), "{t}");

        // An empty table: nothing to select.
        let mut empty = snap();
        empty.rows.clear();
        ui.follow(&[]);
        let t = text(&mut ui, &empty, 120, 30);
        line_of(&t, "No row to select");

        // Too little room: no panel, the table first.
        let t = text(&mut ui, &s, 80, 16);
        assert!(!t.contains("Opcodes") && t.contains("f0"), "{t}");
        // A smaller panel when it only fits so (the thread list gives way
        // first); after the empty table, the top row is selected again.
        let t = text(&mut ui, &s, 80, 19);
        assert!(
            t.contains("─── Opcodes of f0") && !t.contains("MainThread"),
            "{t}"
        );
    }

    #[test]
    fn the_panel_shrinks_to_the_screen_and_says_what_it_leaves_out() {
        let mut s = snap_with_rows(1);
        let mut third = s.rows[0].ops[1].clone();
        third.name = "LOAD_FAST_BORROW".into();
        third.samples = 100;
        s.rows[0].ops.push(third);
        let mut ui = Ui::default().with_opcodes(true);
        ui.show_threads = false;
        // Header 7 lines, rule and column header, 5 rows, footer 2: a panel
        // of 3 lines at height 19: the title, one instruction, two more.
        let t = text(&mut ui, &s, 100, 19);
        line_of(&t, "─── Opcodes of f0");
        line_of(&t, "BINARY_OP_ADD_INT");
        line_of(&t, "… and 2 more instructions");
        assert!(!t.contains("STORE_FAST"), "{t}");
        // One line more: all three.
        let t = text(&mut ui, &s, 100, 20);
        line_of(&t, "LOAD_FAST_BORROW");
        assert!(!t.contains("more instruction"), "{t}");
    }

    #[test]
    fn without_opcodes_nothing_is_selected_and_j_k_do_nothing() {
        let s = snap_with_rows(3);
        let mut ui = Ui::default();
        let t = text(&mut ui, &s, 120, 30);
        assert!(!t.contains("Opcodes") && !t.contains("j/k row"), "{t}");
        let keys: Vec<u32> = s.rows.iter().map(|r| r.key).collect();
        for code in [
            KeyCode::Char('j'),
            KeyCode::Char('k'),
            KeyCode::Up,
            KeyCode::Down,
        ] {
            let k = KeyEvent::new(code, KeyModifiers::NONE);
            assert_eq!(ui.key(k, &[], &keys), Command::Nothing);
        }
        let mut term = ratatui::Terminal::new(TestBackend::new(120, 30)).unwrap();
        term.draw(|f| draw(f, &mut ui, &s)).unwrap();
        let buf = term.backend().buffer().clone();
        assert!(
            buf.content()
                .iter()
                .all(|c| !c.modifier.contains(Modifier::REVERSED)),
            "{t}"
        );
    }

    #[test]
    fn the_selection_moves_follows_its_row_and_scrolls_into_view() {
        let mut ui = Ui::default().with_opcodes(true);
        let press = |ui: &mut Ui, c: char, rows: &[u32]| {
            ui.key(
                KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE),
                &[],
                rows,
            )
        };
        let rows = [7, 8, 9];
        // Before any choice the top row is selected, whichever it is.
        ui.follow(&[9, 8, 7]);
        assert_eq!(ui.selected, 0);
        press(&mut ui, 'k', &rows);
        assert_eq!(ui.selected, 0, "not above the first");
        for _ in 0..5 {
            press(&mut ui, 'j', &rows);
        }
        assert_eq!(ui.selected, 2, "not below the last");
        press(&mut ui, 'k', &rows);
        assert_eq!(ui.selected, 1);
        // Sorted again: the selection follows row 8.
        ui.follow(&[8, 9, 7]);
        assert_eq!(ui.selected, 0);
        // Row 8 gone (a filter, a reset): the same place, and that row.
        ui.follow(&[9, 7]);
        assert_eq!(ui.selected, 0);
        ui.follow(&[7, 9]);
        assert_eq!(ui.selected, 1, "follows 9 now");
        ui.follow(&[]);
        assert_eq!(ui.selected, 0);

        // A long table: moving down scrolls it, the selection stays drawn.
        let s = snap_with_rows(40);
        let keys: Vec<u32> = s.rows.iter().map(|r| r.key).collect();
        let mut ui = Ui::default().with_opcodes(true);
        ui.follow(&keys);
        for _ in 0..30 {
            press(&mut ui, 'j', &keys);
        }
        let t = text(&mut ui, &s, 120, 30);
        assert!(t.contains(" f30 ") && !t.contains(" f0 "), "{t}");
        line_of(&t, "─── Opcodes of f30 at /tmp/w.py:40");
        // Back up: it scrolls back.
        for _ in 0..30 {
            press(&mut ui, 'k', &keys);
        }
        let t = text(&mut ui, &s, 120, 30);
        assert!(
            t.contains(" f0 ") && t.contains("─── Opcodes of f0 "),
            "{t}"
        );
    }
}
