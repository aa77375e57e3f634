//! The terminal side of the live view: taking and always giving back the
//! terminal, reading keys, and drawing a [`Snapshot`] with ratatui.
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
use super::view::{Snapshot, SortBy, Trend, Trends, ViewOptions, snapshot};

/// The smallest screen the view draws on; a smaller one gets a message.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;

/// Redraws per second at the start (`+` and `-` change it).
const DEFAULT_REFRESH: Duration = Duration::from_millis(100);
const FASTEST_REFRESH: Duration = Duration::from_millis(50);
const SLOWEST_REFRESH: Duration = Duration::from_secs(2);

/// The most rows computed for one screen.
const ROW_LIMIT: usize = 500;

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
        }
    }
}

impl Ui {
    /// Apply one key; `threads` are the thread ids, in list order.
    pub fn key(&mut self, k: KeyEvent, threads: &[u64]) -> Command {
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
    let mut term = ratatui::Terminal::new(CrosstermBackend::new(io::stdout()))?;
    let mut ui = Ui::default();
    let mut trends = Trends::default();
    let mut snap: Option<Snapshot> = None;
    let mut next_draw = Instant::now();
    let mut pid = None;
    loop {
        if crate::sample::signals::received().is_some() {
            // SIGTERM or SIGHUP: the sampler stops too; leave now.
            return Ok(());
        }
        let now = Instant::now();
        if now >= next_draw {
            let (ended, fresh) = {
                let agg = shared.lock();
                let fresh = (!ui.paused || snap.is_none())
                    .then(|| snapshot(&agg, &ui.opts, now, &mut trends));
                (agg.ended.map(|(_, how)| how), fresh)
            };
            if ended == Some(Ended::Stopped) {
                return Ok(());
            }
            ui.ended = ended.is_some();
            if let Some(s) = fresh {
                // Another process: messages about it may have been printed
                // over the view; draw it all again.
                if pid.is_some_and(|p| p != s.pid) {
                    term.clear()?;
                }
                pid = Some(s.pid);
                snap = Some(s);
            }
            if let Some(s) = &snap {
                term.draw(|f| draw(f, &ui, s))?;
            }
            next_draw = now + ui.refresh;
        }
        let wait = next_draw.saturating_duration_since(Instant::now());
        if !event::poll(wait)? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let threads: Vec<u64> = snap
                    .as_ref()
                    .map(|s| s.threads.iter().map(|t| t.tid).collect())
                    .unwrap_or_default();
                match ui.key(k, &threads) {
                    Command::Quit => {
                        stop();
                        return Ok(());
                    }
                    Command::Reset => {
                        let mut agg = shared.lock();
                        if agg.ended.is_none() {
                            agg.reset(Instant::now());
                        }
                        drop(agg);
                        ui.paused = false;
                        next_draw = Instant::now();
                    }
                    Command::Redraw => {
                        if k.code == KeyCode::Char('l')
                            && k.modifiers.contains(KeyModifiers::CONTROL)
                        {
                            term.clear()?;
                        }
                        next_draw = Instant::now();
                    }
                    Command::Nothing => {}
                }
            }
            Event::Resize(..) => next_draw = Instant::now(),
            _ => {}
        }
    }
}

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draw one screen.
pub fn draw(f: &mut Frame<'_>, ui: &Ui, s: &Snapshot) {
    let area = f.area();
    let lines = if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area.width, area.height)
    } else if ui.help {
        help()
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

fn help() -> Vec<Line<'static>> {
    let keys: &[(&str, &str)] = &[
        ("s / S", "next / previous sort key"),
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

fn screen(ui: &Ui, s: &Snapshot, w: usize, h: usize) -> Vec<Line<'static>> {
    let sep = |label: &str| Span::styled(label.to_string(), DIM);
    let mut v: Vec<Line<'static>> = Vec::new();
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
    v.push(Line::from(vec![
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
    ]));
    let requested = if s.interval_us > 0 {
        1e6 / s.interval_us as f64
    } else {
        0.0
    };
    let rate = s.rate_hz();
    v.push(Line::raw(format!(
        "Samples: {:>9} total │ rate {} of {} requested ({:.1}%)",
        s.good + s.failed,
        hz(rate),
        hz(requested),
        if requested > 0.0 {
            rate * 100.0 / requested
        } else {
            0.0
        }
    )));
    let attempts = s.good + s.failed;
    v.push(Line::from(vec![
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
    ]));
    let st = &s.states;
    v.push(Line::raw(format!(
        "Threads: {:5.1}% holding GIL │ {:5.1}% released GIL │ {:5.1}% waiting for GIL │ {:5.1}% in exception │ {:5.1}% in GC",
        pct_of(st.gil, st.seen),
        pct_of(st.seen - st.gil.min(st.seen), st.seen),
        pct_of(st.waiting, st.seen),
        pct_of(st.exception, st.seen),
        pct_of(st.gc, st.seen),
    )));
    v.push(Line::raw(format!(
        "Functions: {} total │ {} executing │ {} on stack only │ {} shown",
        s.functions,
        s.executing,
        s.functions - s.executing,
        s.shown
    )));
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
    v.push(Line::from(top));
    match s.ended {
        Some(Ended::TargetExited) => v.push(Line::styled(
            "PROFILING COMPLETE: the target exited. Final results below; q (or Enter) quits.",
            BOLD.fg(Color::Green),
        )),
        Some(Ended::Duration) => v.push(Line::styled(
            "PROFILING COMPLETE: the duration is over. Final results below; q (or Enter) quits.",
            BOLD.fg(Color::Green),
        )),
        _ => {}
    }
    // The thread list, when it fits beside at least a few rows.
    let footer = 2;
    let table_min = 5;
    if ui.show_threads && !s.threads.is_empty() {
        let room = h.saturating_sub(v.len() + 1 + 1 + table_min + footer + 1);
        let shown = s.threads.len().min(room).min(6);
        if shown > 0 {
            v.push(Line::styled(
                format!("Thread list ({}):", s.threads.len()),
                DIM,
            ));
            // Keep the selected thread in the list.
            let sel = ui
                .opts
                .thread
                .and_then(|t| s.threads.iter().position(|x| x.tid == t))
                .unwrap_or(0);
            let first = sel.saturating_sub(shown - 1);
            for t in s.threads.iter().skip(first).take(shown) {
                let mark = if ui.opts.thread == Some(t.tid) {
                    "▶"
                } else {
                    " "
                };
                let name = t.name.as_deref().unwrap_or("-");
                let text = format!(
                    " {mark} {:<10} {:<24} {:5.1}% of samples  {}",
                    t.tid,
                    fit(name, 24),
                    pct_of(t.samples, s.good),
                    t.state
                );
                let style = if ui.opts.thread == Some(t.tid) {
                    BOLD
                } else {
                    Style::new()
                };
                v.push(Line::styled(fit(&text, w), style));
            }
        }
    }
    v.push(Line::styled("─".repeat(w), DIM));
    // The table: the time columns go first when the screen is narrow.
    let times = w >= 100;
    let sorted = |col: SortBy| ui.opts.sort == col;
    let head = |label: &str, width: usize, col: SortBy| -> Span<'static> {
        let text = if sorted(col) {
            format!("{:>width$}", format!("▼{label}"))
        } else {
            format!("{label:>width$}")
        };
        Span::styled(
            text,
            if sorted(col) {
                BOLD.fg(Color::Cyan)
            } else {
                BOLD
            },
        )
    };
    let mut hs = vec![
        head("nsamples", 15, SortBy::SelfSamples),
        head("%", 7, SortBy::SelfPct),
    ];
    if times {
        hs.push(head("tottime", 10, SortBy::SelfTime));
    }
    hs.push(head("%", 7, SortBy::CumPct));
    if times {
        hs.push(head("cumtime", 10, SortBy::CumTime));
    }
    let fixed: usize = if times {
        15 + 7 + 10 + 7 + 10
    } else {
        15 + 7 + 7
    };
    let rest = w.saturating_sub(fixed + 3);
    let func_w = (rest / 2).clamp(10, 40);
    let file_w = rest.saturating_sub(func_w + 1);
    hs.push(Span::styled(
        format!("   {:<func_w$} {}", "function", "file:line"),
        BOLD,
    ));
    v.push(Line::from(hs));
    let body = h.saturating_sub(v.len() + footer);
    for r in s.rows.iter().take(body) {
        let mut spans = vec![
            Span::styled(
                format!("{:>15}", format!("{}/{}", r.self_samples, r.cum_samples)),
                Style::new().fg(Color::Cyan),
            ),
            Span::raw(format!("{:>7.1}", s.pct(r.self_samples))),
        ];
        if times {
            spans.push(Span::raw(format!("{:>10.3}", s.seconds(r.self_samples))));
        }
        spans.push(Span::raw(format!("{:>7.1}", s.pct(r.cum_samples))));
        if times {
            spans.push(Span::raw(format!("{:>10.3}", s.seconds(r.cum_samples))));
        }
        let (mark, style) = match (ui.trends, r.trend) {
            (true, Trend::Up) => ("▲", Style::new().fg(Color::Red)),
            (true, Trend::Down) => ("▼", Style::new().fg(Color::Green)),
            _ => (" ", Style::new()),
        };
        spans.push(Span::styled(format!(" {mark} "), style));
        spans.push(Span::styled(
            format!("{:<func_w$} ", fit(&r.func, func_w)),
            Style::new().fg(Color::Yellow),
        ));
        spans.push(Span::styled(
            fit_end(&format!("{}:{}", r.file, r.line), file_w),
            DIM,
        ));
        v.push(Line::from(spans));
    }
    while v.len() + footer < h {
        v.push(Line::raw(""));
    }
    v.push(Line::styled(
        "nsamples: self/cumulative (self: executing; cumulative: on the stack)",
        DIM,
    ));
    let last = if let Some(text) = &ui.input {
        Line::from(vec![
            Span::styled("Filter: ", BOLD),
            Span::raw(format!("{text}_")),
            Span::styled("   (Enter applies, Esc cancels)", DIM),
        ])
    } else {
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
            " │ s/S sort  t thread  ←→ threads  / filter  p pause  r reset  h help  q quit",
            DIM,
        ));
        Line::from(spans)
    };
    v.push(last);
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
            states: Default::default(),
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

    fn text(ui: &Ui, s: &Snapshot, w: u16, h: u16) -> String {
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
        let ui = Ui::default();
        let t = text(&ui, &snap(), 140, 30);
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
        let t = text(&ui, &snap(), 70, 20);
        assert!(t.contains("checksum") && !t.contains("tottime"), "{t}");
    }

    #[test]
    fn a_small_terminal_gets_a_message() {
        let t = text(&Ui::default(), &snap(), 30, 8);
        assert!(t.contains("Terminal too small"), "{t}");
        // The smallest accepted size draws the view.
        let t = text(&Ui::default(), &snap(), MIN_WIDTH, MIN_HEIGHT);
        assert!(t.contains("checksum"), "{t}");
    }

    fn press(ui: &mut Ui, code: KeyCode, threads: &[u64]) -> Command {
        ui.key(KeyEvent::new(code, KeyModifiers::NONE), threads)
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
        assert_eq!(ui.key(ctrl_c, &th), Command::Quit);
    }
}
