//! `culprit train` and `culprit diagnose`: options into a [`Setup`], the analysis library
//! ([`culprit_analysis`]) does the rest; the report for people is `culprit_text`'s.

use std::io::Write as _;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::time::Duration;

use culprit_analysis::baseline::{self, Baseline, BaselineSpan, Ranges, Rolling};
use culprit_analysis::data::{Dataset, DirSource, Source};
use culprit_analysis::diagnosis::ClosedWindow;
use culprit_analysis::live::LiveStatus;
use culprit_analysis::plan::Progress;
use culprit_analysis::policy::Pool;
use culprit_analysis::requests::RequestsOptions;
use culprit_analysis::session::{self, DiagnoseRequest, Follow};
use culprit_analysis::setup::{Overrides, Setup, TrainedThresholds};
use culprit_analysis::thresholds::{ThresholdRule, UnseenScale};
use culprit_analysis::time::{fmt_dur, fmt_sig, parse_duration_ns};
use culprit_analysis::train::{self, TrainingRun};
use culprit_openmetrics::{ListenError, MetricsServer};

use crate::features::{self, Part};
use crate::progress::Bar;

pub mod requests;

/// Exit status when a culprit is found.
pub const EXIT_CULPRIT: i32 = 1;

/// Arguments of `culprit train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  culprit train run1/ run2/ run3/ --out thresholds.json\n  \
    culprit train --from DATA/ --span 2026-11-27T00:00..2026-11-28T00:00 --out fleet.json\n\n\
    Each DATA is the data root of one fault-free run (DATA/<node>/…), or with --span the \
    stretch of it taken as normal. Per node and metric, the threshold is the least integer \
    leaving no window of any run anomalous, doubled (seed 000). A node that differed from its \
    peers the same way throughout is recorded as another role and judged against its own \
    normal."
)]
pub struct TrainArgs {
    /// Data roots of fault-free runs, one per run
    #[arg(value_name = "DATA", required_unless_present = "from")]
    pub data: Vec<PathBuf>,
    /// A data root to learn from (the same as DATA; reads well with --span)
    #[arg(long, value_name = "DATA")]
    pub from: Vec<PathBuf>,
    /// Learn only this stretch of each run: `first 30m`, `first 1/3`,
    /// `2026-11-27T00:00..2026-11-28T00:00`, `+5m..+35m` (a baseline of the data itself;
    /// docs/thresholds.md)
    #[arg(long, value_name = "SPAN", value_parser = baseline_span)]
    pub span: Option<BaselineSpan>,
    /// Where to write the thresholds
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Print the thresholds as JSON
    #[arg(long)]
    pub json: bool,
    /// Which training score each threshold doubles
    #[arg(long, value_enum, default_value_t = ThresholdRule::Window)]
    pub threshold_rule: ThresholdRule,
    /// How diagnose weights a function training never kept (variance weighting)
    #[arg(long, value_enum, default_value_t = UnseenScale::default())]
    pub unseen_scale: UnseenScale,
    #[command(flatten)]
    pub analysis: Overrides,
}

/// Arguments of `culprit diagnose`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  culprit diagnose DATA/ --thresholds thresholds.json\n  \
    culprit diagnose DATA/ --json > report.json\n  culprit diagnose DATA/ --follow\n  \
    culprit diagnose DATA/ --html report.html   # open it in a browser\n\n\
    culprit diagnose DATA/ --baseline \"first 30m\"   # learn normal from the first 30 minutes\n  \
    culprit diagnose DATA/ --follow --baseline last:6h   # a rolling baseline\n\n\
    culprit diagnose DATA/ --follow --metrics-listen 9464   # Prometheus scrapes :9464/metrics\n  \
    culprit diagnose nats://HOST:4222/GROUP --follow   # records `culprit ship` sends\n\n\
    Exit status: 0 no node flagged, 1 a faulty (or stopped) node found, 2 error."
)]
pub struct DiagnoseArgs {
    /// A data root (one directory per node in it) or node directories; with --follow, a
    /// NATS JetStream group as nats://HOST:PORT/GROUP or tls://… (docs/nats.md)
    #[arg(required = true, value_name = "DATA")]
    pub data: Vec<PathBuf>,
    /// Trained thresholds (from `culprit train`); without them seed 002's suspect score and an
    /// unsupervised cut-off are used (a node different from its peers from the start is flagged:
    /// give a --baseline, or leave a node with another role out with --exclude-node)
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
    /// Learn normal from this stretch of the data itself and diagnose what follows it:
    /// `first 30m`, `first 1/3`, `2026-11-27T00:00..2026-11-28T00:00`, `+5m..+35m`, or
    /// `last:7d` — rolling: each stretch judged by the last 7 days before it not under
    /// suspicion. A node that differed from its peers the same way throughout the baseline is
    /// another role, judged against its own normal (docs/thresholds.md)
    #[arg(long, value_name = "SPAN", value_parser = baseline_span,
          conflicts_with_all = ["thresholds", "requests"])]
    pub baseline: Option<BaselineSpan>,
    /// Print the report as JSON (schema: docs/diagnose-json.md)
    #[arg(long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page (charts of every node's score
    /// over time, the culprit's top functions, the ranked suspects) to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Diagnose a run in progress: report each window as it closes, until every writer has
    /// ended (or --for elapses), then print the report
    #[arg(long)]
    pub follow: bool,
    /// With --follow: stop after this long
    #[arg(long = "for", value_name = "DUR", value_parser = parse_duration_ns)]
    pub for_: Option<u64>,
    /// With --follow: serve the diagnosis as it stands as OpenMetrics at
    /// http://ADDR/metrics (PORT or :PORT binds 127.0.0.1; HOST:PORT as given; families:
    /// docs/alerting.md)
    #[arg(long, value_name = "ADDR", requires = "follow")]
    pub metrics_listen: Option<String>,
    /// Rows of each root-cause table
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Give each node the threshold trained on it (seed 000): the same as
    /// `--threshold-pool own`
    #[arg(long, conflicts_with = "threshold_pool")]
    pub per_node_thresholds: bool,
    /// Which trained threshold each node gets [default: largest — peers are alike, and which
    /// one strays most in a few training runs is chance; docs/thresholds.md]
    #[arg(long, value_enum, value_name = "RULE")]
    pub threshold_pool: Option<Pool>,
    /// Judge by the trained thresholds alone, also in windows where every node deviates more
    /// than in any training window (for measurements: docs/thresholds.md)
    #[arg(long, hide = true)]
    pub no_shared_discount: bool,
    /// Seed 004's request analysis instead: the anomalous method and node from the calls of
    /// sampled requests (culprit_request_begin/_end), by call-tree categories and robust PCA;
    /// needs no thresholds (docs/requests.md)
    #[arg(long, conflicts_with_all = ["thresholds", "follow", "html"])]
    pub requests: bool,
    /// With --requests: a category is anomalous above this coefficient of variation of its
    /// latencies [default: 0.3]
    #[arg(long, value_name = "CV", requires = "requests")]
    pub requests_cv: Option<f64>,
    /// With --requests: a method is anomalous below this cosine between its latencies and
    /// their low-rank part [default: 0.9]
    #[arg(long, value_name = "COS", requires = "requests")]
    pub requests_cos: Option<f64>,
    #[command(flatten)]
    pub nats: culprit_ship::cli::FollowArgs,
    #[command(flatten)]
    pub analysis: Overrides,
}

/// The flag of an analysis setting (`win-size`: `--win-size`), for the analysis' messages,
/// which name settings.
pub(crate) fn flag(setting: &str) -> String {
    format!("--{setting}")
}

/// A `--baseline` or `--span` value, its error in the CLI's words.
fn baseline_span(s: &str) -> Result<BaselineSpan, String> {
    BaselineSpan::from_str(s).map_err(|m| m.render(flag))
}

/// Runs `culprit train`.
pub fn run_train(args: TrainArgs) -> anyhow::Result<i32> {
    let setup = Setup::for_training(&args.analysis)?;
    let mut runs = Vec::new();
    for p in args.data.iter().chain(&args.from) {
        let run = TrainingRun::dir(p);
        runs.push(match args.span {
            None => run,
            Some(span) => {
                if span.rolling().is_some() {
                    anyhow::bail!(
                        "--span {span}: a rolling baseline is for diagnose --baseline; train on \
                         a fixed stretch"
                    );
                }
                let source = Box::new(DirSource::new(vec![p.clone()], false));
                let data = baseline::data_span(source, &setup)?;
                run.within(Ranges::one(span.resolve(data)?))
            }
        });
    }
    let mut bar = Bar::new("training");
    let training = train::train(
        &setup,
        runs,
        train::Rules {
            threshold: args.threshold_rule,
            unseen: args.unseen_scale,
        },
        &mut bar,
    )?;
    drop(bar);
    let file = &training.file;
    file.save(&args.out)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, file)?;
        writeln!(out)?;
        for w in &training.warnings {
            eprintln!("culprit: warning: {w}");
        }
        return Ok(0);
    }
    let s = &file.settings;
    writeln!(
        out,
        "culprit train: {} run(s); windows {} every {}; score {}, distance {}, weighting {}, \
         threshold rule {}",
        file.runs.len(),
        fmt_dur(s.win_size_ns),
        fmt_dur(s.win_shift_ns),
        s.score.name(),
        s.distance.name(),
        s.weighting.name(),
        args.threshold_rule.name()
    )?;
    for (m, t) in &file.metrics {
        let list: Vec<String> = t
            .thresholds
            .iter()
            .map(|(n, v)| format!("{n} {}", fmt_sig(*v)))
            .collect();
        writeln!(
            out,
            "{m}: {} functions kept, {} windows; thresholds ({}): {}",
            t.kept.len(),
            t.windows,
            t.unit,
            list.join(", ")
        )?;
    }
    for w in &training.warnings {
        writeln!(out, "warning: {w}")?;
    }
    for n in &training.notes {
        writeln!(out, "note: {n}")?;
    }
    writeln!(out, "wrote {}", args.out.display())?;
    Ok(0)
}

/// Runs `culprit diagnose`.
pub fn run_diagnose(args: DiagnoseArgs) -> anyhow::Result<i32> {
    if args.data.iter().any(|d| culprit_ship::cli::is_broker(d)) {
        features::require(Part::Ship)?;
    }
    if args.requests {
        features::require(Part::Requests)?;
        let found = run_requests(&args)?;
        return Ok(if found { EXIT_CULPRIT } else { 0 });
    }
    if args.for_.is_some() && !args.follow {
        anyhow::bail!("--for limits --follow: give both, or neither");
    }
    let nats = args.nats.start(&args.data, args.follow)?;
    let data = nats
        .as_ref()
        .map_or(args.data.clone(), |f| vec![f.root().into()]);
    let overrides = &args.analysis;
    let (trained, baseline) = match (&args.thresholds, args.baseline) {
        (Some(p), _) => (Some(TrainedThresholds::load(p)?), None),
        (None, Some(span)) => {
            let (t, b) = learn_baseline(overrides, &data, span, args.follow, args.for_)?;
            (Some(t), Some(b))
        }
        (None, None) => (None, None),
    };
    let setup = Setup::resolve(overrides, trained.as_ref())?;
    let mut req = DiagnoseRequest::dirs(&data, args.top);
    if let Some(b) = baseline {
        req.windows = Some(Ranges::from(b.learnt_to));
        req.baseline = Some(b.baseline);
    }
    req.pool = match (args.per_node_thresholds, args.threshold_pool) {
        (true, _) => Pool::Own,
        (false, p) => p.unwrap_or_default(),
    };
    req.discount_shared = !args.no_shared_discount;
    req.follow = args.follow.then(|| Follow {
        limit: args.for_.map(Duration::from_nanos),
    });
    // Bound before anything else, so that a busy port is the first thing said.
    let server = match &args.metrics_listen {
        Some(spec) => {
            let s = MetricsServer::start(spec).map_err(|e| match e {
                ListenError::LocalAddr(_) | ListenError::Thread(_) => {
                    anyhow::anyhow!("--metrics-listen: {e}")
                }
                _ => anyhow::anyhow!("--metrics-listen {e}"),
            })?;
            eprintln!(
                "culprit: serving OpenMetrics on http://{}/metrics",
                s.addr()
            );
            Some(s)
        }
        None => None,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let diagnosis = if args.follow {
        let mut live = Live {
            out: &mut out,
            json: args.json,
            setup: &setup,
            server: server.as_ref(),
            nats: nats.as_ref(),
        };
        session::diagnose(&setup, trained.as_ref(), req, &mut live)?
    } else {
        let mut bar = Bar::new("diagnosing");
        session::diagnose(&setup, trained.as_ref(), req, &mut bar)?
    };
    if args.json && args.follow {
        // After the window events' JSON lines: the report on one line too.
        serde_json::to_writer(&mut out, &diagnosis)?;
        writeln!(out)?;
    } else if args.json {
        serde_json::to_writer_pretty(&mut out, &diagnosis)?;
        writeln!(out)?;
    } else {
        culprit_text::diagnose::print_human(&diagnosis, &mut out)?;
    }
    out.flush()?;
    if let Some(f) = nats {
        f.finish(Duration::from_secs(5));
    }
    if let Some(path) = &args.html {
        culprit_report_html::write(&diagnosis, path, &Default::default())?;
        eprintln!("culprit: HTML report written to {}", path.display());
    }
    Ok(if diagnosis.culprits.is_empty() {
        0
    } else {
        EXIT_CULPRIT
    })
}

/// A baseline learnt for `diagnose --baseline`, and where the diagnosis starts.
struct Learnt {
    baseline: Baseline,
    learnt_to: u64,
}

/// Learns `diagnose --baseline SPAN` from the data in `data` (with `--follow`, once the data
/// reaches the end of the span), printing what learning warns of on stderr.
fn learn_baseline(
    overrides: &Overrides,
    data: &[PathBuf],
    span: BaselineSpan,
    follow: bool,
    limit_ns: Option<u64>,
) -> anyhow::Result<(TrainedThresholds, Learnt)> {
    let setup = Setup::for_training(overrides)?;
    let paths = data.to_vec();
    let source = move || -> Box<dyn Source> { Box::new(DirSource::new(paths.clone(), false)) };
    let rules = train::Rules {
        threshold: ThresholdRule::default(),
        unseen: UnseenScale::default(),
    };
    let learned = if follow {
        let limit = limit_ns.map(Duration::from_nanos);
        baseline::learn_following(&setup, &source, span, rules, limit, &mut |until| {
            eprintln!(
                "culprit: learning the baseline ({span}): waiting for data until {}",
                culprit_analysis::time::wall_iso(until)
            );
        })?
    } else {
        let mut bar = Bar::new("learning the baseline");
        baseline::learn(&setup, &source, span, rules, &mut bar)?
    };
    for w in &learned.report.warnings {
        eprintln!("culprit: warning: {w}");
    }
    let rolling = span.rolling().map(|len| Rolling {
        spec: span,
        len_ns: len,
        every_ns: baseline::relearn_every(len, setup.settings.win_shift_ns),
        setup: setup.clone(),
        rules,
        source: Box::new(source),
        learnt_to: learned.span.end_ns,
    });
    Ok((
        learned.trained,
        Learnt {
            baseline: Baseline {
                report: learned.report,
                rolling,
            },
            learnt_to: learned.span.end_ns,
        },
    ))
}

/// `diagnose --requests`: seed 004's request analysis, rendered by `culprit_text`; true when a
/// method is ranked (exit status 1).
fn run_requests(args: &DiagnoseArgs) -> anyhow::Result<bool> {
    let ds = Dataset::open(&args.data, args.analysis.load_options())?;
    let default = RequestsOptions::default();
    let opts = RequestsOptions {
        cv_threshold: args.requests_cv.unwrap_or(default.cv_threshold),
        cos_threshold: args.requests_cos.unwrap_or(default.cos_threshold),
        ..default
    };
    let report = culprit_analysis::requests::analyze(&ds, &opts);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &requests::Document { requests: &report })?;
        writeln!(out)?;
    } else {
        culprit_text::requests::print_human(&report, &opts, args.top, &mut out)?;
    }
    out.flush()?;
    for w in &ds.warnings {
        eprintln!("culprit: warning: {w}");
    }
    Ok(!report.ranking.is_empty())
}

/// `--follow`: windows as they close, one line each (JSON Lines with `--json`).
struct Live<'a, W: std::io::Write> {
    out: &'a mut W,
    json: bool,
    setup: &'a Setup,
    /// `--metrics-listen`: where the diagnosis as it stands is served.
    server: Option<&'a MetricsServer>,
    /// `nats://…/GROUP`: where each window's line is published too.
    nats: Option<&'a culprit_ship::follow::Follower>,
}

impl<W: std::io::Write> Progress for Live<'_, W> {
    fn following(&mut self, nodes: usize) -> std::io::Result<()> {
        if self.json {
            return Ok(());
        }
        let s = &self.setup.settings;
        writeln!(
            self.out,
            "following {nodes} node(s); windows of {} every {}; a window is reported when \
             every live writer has data past its end",
            fmt_dur(s.win_size_ns),
            fmt_dur(s.win_shift_ns)
        )?;
        // What it waits for, said before the first window closes (issue 31: a user saw nothing
        // for two minutes and could not tell waiting from hanging).
        let need = 2 * s.k as u64 - 1;
        writeln!(
            self.out,
            "waiting for data: the first window closes {} after the data begins; a verdict \
             reads {} of {need} windows, so the first can come {} after it begins \
             (shorter windows: --win-size, --win-shift)",
            fmt_dur(s.win_size_ns),
            s.k,
            fmt_dur(s.win_size_ns + (s.k as u64 - 1) * s.win_shift_ns)
        )?;
        self.out.flush()
    }

    fn windows_closed(&mut self, closed: &[ClosedWindow]) -> std::io::Result<()> {
        for w in closed {
            if let Some(f) = self.nats {
                f.publish_verdict(serde_json::to_vec(&w.line()).map_err(std::io::Error::other)?);
            }
            if self.json {
                serde_json::to_writer(&mut *self.out, &w.line())?;
                writeln!(self.out)?;
            } else {
                culprit_text::diagnose::print_window(w, self.setup.settings.k, self.out)?;
            }
        }
        self.out.flush()
    }

    fn wants_live(&self) -> bool {
        self.server.is_some()
    }

    fn live(&mut self, status: LiveStatus) -> std::io::Result<()> {
        if let Some(s) = self.server {
            s.publish(status);
        }
        Ok(())
    }

    fn stopped_following(&mut self) -> std::io::Result<()> {
        if !self.json {
            writeln!(self.out)?;
        }
        Ok(())
    }
}
