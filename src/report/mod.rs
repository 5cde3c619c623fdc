//! `ri-batch report`: one self-contained HTML file (inline SVG plots drawn with plotters, inline
//! CSS, no network) from the Parquet artifacts of an output directory: the summary with
//! intervals, recall against budget, pool versus packed recall, paired differences from the
//! baseline, a per-repository breakdown, extract outcomes and the run manifest.

pub mod compare;
pub mod summary;
pub mod trec;

use crate::artifact::outcomes::VariantStatus;
use crate::artifact::schema::{ComparisonRow, EvaluationRow, SummaryRow};
use crate::artifact::{write_atomic, Store};
use crate::error::{Error, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::text::escape_html as esc;

fn plot_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Invalid(format!("drawing a plot: {e:?}"))
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Writes each row's name left of the plotting area, centred on its row (rows are drawn bottom-up
/// at y = n - 1 - i .. n - i).
fn label_rows<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &ChartContext<
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    x: f64,
    names: &[String],
) -> Result<()> {
    let n = names.len();
    let style = ("sans-serif", 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (i, name) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(x, (n - 1 - i) as f64 + 0.5));
        root.draw(&Text::new(name.clone(), (px - 8, py), style.clone()))
            .map_err(plot_err)?;
    }
    Ok(())
}

/// Packed recall against budget, one line per (retriever, packer) family.
fn budget_plot(rows: &[&SummaryRow], split: &str) -> Result<Option<String>> {
    let mut families: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in rows.iter().filter(|s| s.status == VariantStatus::Ok) {
        if let Some(r) = s.packed_recall {
            families
                .entry(format!("{} + {}", s.retriever, s.packer))
                .or_default()
                .push((s.budget as f64, r));
        }
    }
    families.retain(|_, v| v.len() > 1);
    if families.is_empty() {
        return Ok(None);
    }
    let max_b = families.values().flatten().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Packed evidence recall against token budget ({split})"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..max_b, 0f64..1.0f64)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("budget (tokens)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("packed recall")
            .draw()
            .map_err(plot_err)?;
        for (i, (name, mut pts)) in families.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(plot_err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(Some(svg))
}

/// Horizontal bars: pool recall and packed recall per variant.
fn pool_packed_plot(rows: &[&SummaryRow], split: &str) -> Result<Option<String>> {
    let data: Vec<(&str, f64, f64)> = rows
        .iter()
        .filter_map(|s| Some((s.variant.as_str(), s.pool_recall?, s.packed_recall?)))
        .collect();
    if data.is_empty() {
        return Ok(None);
    }
    let n = data.len();
    let names: Vec<String> = data.iter().map(|d| d.0.to_string()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 60 + 34 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Recall of the retrieved pool and of the packed context ({split})"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(160)
            .build_cartesian_2d(0f64..1.0f64, 0f64..n as f64)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("required-evidence recall")
            .draw()
            .map_err(plot_err)?;
        label_rows(&root, &chart, 0.0, &names)?;
        for (k, (label, color)) in [("pool", COLORS[7]), ("packed", COLORS[0])]
            .into_iter()
            .enumerate()
        {
            chart
                .draw_series(data.iter().enumerate().map(|(i, d)| {
                    let y = (n - 1 - i) as f64;
                    let v = if k == 0 { d.1 } else { d.2 };
                    let (y0, y1) = if k == 0 {
                        (y + 0.52, y + 0.88)
                    } else {
                        (y + 0.12, y + 0.48)
                    };
                    Rectangle::new([(0.0, y0), (v, y1)], color.filled())
                }))
                .map_err(plot_err)?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(Some(svg))
}

/// Forest plot: the paired difference of `metric` from the baseline with its 95% interval.
fn forest_plot(cmps: &[&ComparisonRow], metric: &str, split: &str) -> Result<Option<String>> {
    if cmps.is_empty() {
        return Ok(None);
    }
    let n = cmps.len();
    let lo = cmps.iter().map(|c| c.ci_low).fold(0.0, f64::min);
    let hi = cmps.iter().map(|c| c.ci_high).fold(0.0, f64::max);
    let pad = ((hi - lo) * 0.08).max(0.01);
    let names: Vec<String> = cmps.iter().map(|c| c.variant.clone()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 60 + 30 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{metric}: difference from {} with 95% paired bootstrap interval ({split})",
                    cmps[0].baseline
                ),
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(160)
            .build_cartesian_2d((lo - pad)..(hi + pad), 0f64..n as f64)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("difference")
            .draw()
            .map_err(plot_err)?;
        label_rows(&root, &chart, lo - pad, &names)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 0.0), (0.0, n as f64)],
                BLACK.stroke_width(1),
            )))
            .map_err(plot_err)?;
        chart
            .draw_series(cmps.iter().enumerate().map(|(i, c)| {
                let y = (n - 1 - i) as f64 + 0.5;
                let color = if c.ci_low > 0.0 {
                    COLORS[2]
                } else if c.ci_high < 0.0 {
                    COLORS[3]
                } else {
                    COLORS[7]
                };
                ErrorBar::new_horizontal(
                    y,
                    c.ci_low,
                    c.diff,
                    c.ci_high,
                    color.filled().stroke_width(2),
                    10,
                )
            }))
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(Some(svg))
}

fn num(x: Option<f64>) -> String {
    x.map_or("–".into(), |v| format!("{v:.4}"))
}

/// The report's HTML.
pub fn html(dir: &Path) -> Result<String> {
    let store = Store::new(dir);
    if store
        .manifest(crate::artifact::StageId::Evaluate)?
        .is_none()
    {
        return Err(Error::Invalid(format!(
            "{}: the evaluate stage has not run; run the pipeline first",
            dir.display()
        )));
    }
    let summary: Vec<SummaryRow> = store.read()?;
    let comparisons: Vec<ComparisonRow> = store.read()?;
    let evaluation: Vec<EvaluationRow> = store.read()?;
    let manifests = store.manifests()?;
    let mut splits: Vec<&str> = summary.iter().map(|s| s.split.as_str()).collect();
    splits.sort_by_key(|s| (*s != "dev", *s));
    splits.dedup();
    let title = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let ranking = summary.iter().any(|s| s.ndcg10.is_some());
    let outcomes = summary.iter().any(|s| s.full.is_some());

    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ri-batch report: {t}</title>\n<style>\
         body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:13px}}th,td{{border:1px solid #ccc;padding:3px 7px;text-align:right}}\
         th{{background:#f3f3f3}}td.l,th.l{{text-align:left}}tr.notrun td{{color:#999}}.pos{{color:#1a7f37}}.neg{{color:#c62828}}\
         figure{{margin:1.5em 0}}h2{{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}}.note{{color:#555;font-size:13px}}\
         </style></head><body>\n<h1>ri-batch report: {t}</h1>\n<p class=\"note\">pool = required-evidence recall of the retrieved pool; \
         packed = recall of what fits the token budget (what a model sees); differences are paired over the same questions, \
         with 95% bootstrap intervals. Generated from {d}.</p>\n",
        t = esc(&title),
        d = esc(&dir.display().to_string())
    );
    for split in &splits {
        let rows: Vec<&SummaryRow> = summary.iter().filter(|s| s.split == *split).collect();
        let label = if *split == "holdout" {
            " (final check; not for choosing settings)"
        } else {
            ""
        };
        let first = rows[0];
        let _ = write!(
            h,
            "<h2 id=\"split-{s}\">Split {s}{label}: {} questions, {} answerable</h2>\n<table class=\"summary\" data-split=\"{s}\">\n<tr><th class=\"l\">variant</th><th>retriever</th><th>packer</th><th>budget</th><th>pool</th><th>packed</th><th>tokens</th><th>packed − baseline [95% CI]</th><th>W/L/T</th>",
            first.questions,
            first.answerable,
            s = esc(split)
        );
        if ranking {
            h.push_str("<th>MRR@10</th><th>nDCG@10</th><th>R@10</th><th>R@100</th><th>Acc@1</th><th>Acc@5</th><th>Acc@10</th>");
        }
        h.push_str("</tr>\n");
        summary_rows(&mut h, &rows, &comparisons, split, ranking);
        h.push_str("</table>\n");
        for svg in [budget_plot(&rows, split)?, pool_packed_plot(&rows, split)?]
            .into_iter()
            .flatten()
        {
            let _ = writeln!(h, "<figure class=\"plot\">{svg}</figure>");
        }
        for metric in ["packed_recall", "ndcg10"] {
            let cmps: Vec<&ComparisonRow> = comparisons
                .iter()
                .filter(|c| c.split == *split && c.metric == metric)
                .collect();
            if let Some(svg) = forest_plot(&cmps, metric, split)? {
                let _ = writeln!(h, "<figure class=\"plot\">{svg}</figure>");
            }
        }
        // Per-repository breakdowns (a repository's revisions together): packed recall of the
        // answerable questions, and file-level Acc@10 where questions have gold documents.
        per_repository(&mut h, &evaluation, &rows, split, "Packed recall", |e| {
            e.packed_recall
        });
        per_repository(&mut h, &evaluation, &rows, split, "File Acc@10", |e| {
            e.acc10
        });
        if outcomes {
            outcome_table(&mut h, &rows, split);
        }
    }
    h.push_str(&history_section(&store)?);
    manifest_section(&mut h, &manifests);
    h.push_str("</table>\n</body></html>\n");
    Ok(h)
}

/// One table row per variant of `split`: its figures, and its packed recall against the
/// baseline with interval and wins/losses/ties (a variant that did not run says why).
fn summary_rows(
    h: &mut String,
    rows: &[&SummaryRow],
    comparisons: &[ComparisonRow],
    split: &str,
    ranking: bool,
) {
    for s in rows {
        let v = esc(&s.variant);
        if s.status != VariantStatus::Ok {
            let _ = writeln!(
                h,
                "<tr class=\"notrun\"><td class=\"l\">{v}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\" colspan=\"{}\">{}</td></tr>",
                esc(&s.retriever),
                esc(&s.packer),
                s.budget,
                if ranking { 12 } else { 5 },
                esc(&s.status.to_string())
            );
            continue;
        }
        let cell = |metric: &str, x: Option<f64>| {
            format!(
                "<td data-variant=\"{v}\" data-split=\"{}\" data-metric=\"{metric}\">{}</td>",
                esc(split),
                num(x)
            )
        };
        let cmp = comparisons
            .iter()
            .find(|c| c.variant == s.variant && c.split == split && c.metric == "packed_recall");
        let (delta, wlt) = match cmp {
            Some(c) => {
                let class = if c.ci_low > 0.0 {
                    "pos"
                } else if c.ci_high < 0.0 {
                    "neg"
                } else {
                    ""
                };
                (
                    format!(
                        "<td class=\"{class}\">{:+.4} [{:+.4}, {:+.4}]</td>",
                        c.diff, c.ci_low, c.ci_high
                    ),
                    format!("<td>{}/{}/{}</td>", c.wins, c.losses, c.ties),
                )
            }
            None => ("<td>baseline</td>".to_string(), "<td></td>".to_string()),
        };
        let tokens = s.mean_tokens.map_or("–".into(), |t| format!("{t:.1}"));
        let _ = write!(
            h,
            "<tr><td class=\"l\">{v}</td><td>{}</td><td>{}</td><td>{}</td>{}{}<td data-variant=\"{v}\" data-split=\"{}\" data-metric=\"mean_tokens\">{tokens}</td>{delta}{wlt}",
            esc(&s.retriever),
            esc(&s.packer),
            s.budget,
            cell("pool_recall", s.pool_recall),
            cell("packed_recall", s.packed_recall),
            esc(split),
        );
        if ranking {
            h.push_str(&cell("mrr10", s.mrr10));
            h.push_str(&cell("ndcg10", s.ndcg10));
            h.push_str(&cell("recall10", s.recall10));
            h.push_str(&cell("recall100", s.recall100));
            h.push_str(&cell("acc1", s.acc1));
            h.push_str(&cell("acc5", s.acc5));
            h.push_str(&cell("acc10", s.acc10));
        }
        h.push_str("</tr>\n");
    }
}

/// The extract outcomes of `split`'s variants that ran a selector.
fn outcome_table(h: &mut String, rows: &[&SummaryRow], split: &str) {
    let _ = write!(
        h,
        "<h3>Extract outcomes ({})</h3>\n<table class=\"outcomes\"><tr><th class=\"l\">variant</th><th>full</th><th>partial</th><th>irrelevant</th><th>false refusal</th><th>correct refusal</th><th>false selection</th><th>contract refusals</th></tr>\n",
        esc(split)
    );
    for s in rows.iter().filter(|s| s.full.is_some()) {
        let c = |x: Option<u32>| x.map_or("–".into(), |v| v.to_string());
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.variant),
            c(s.full),
            c(s.partial),
            c(s.irrelevant),
            c(s.false_refusal),
            c(s.correct_refusal),
            c(s.false_selection),
            c(s.contract_refusals)
        );
    }
    h.push_str("</table>\n");
}

/// Each stage's manifest: seconds, rows per table, config hash, tool and notes.
fn manifest_section(h: &mut String, manifests: &BTreeMap<String, crate::artifact::Manifest>) {
    h.push_str("<h2>Run manifest</h2>\n<table class=\"manifest\"><tr><th class=\"l\">stage</th><th>seconds</th><th class=\"l\">rows</th><th class=\"l\">config hash</th><th class=\"l\">tool</th><th class=\"l\">notes</th></tr>\n");
    for stage in crate::artifact::StageId::ALL {
        let Some(m) = manifests.get(stage.name()) else {
            continue;
        };
        let mut rows: BTreeMap<&str, u64> = BTreeMap::new();
        for f in &m.files {
            *rows.entry(f.table.as_str()).or_default() += f.rows;
        }
        let rows: Vec<String> = rows.iter().map(|(t, n)| format!("{t} {n}")).collect();
        let notes: Vec<String> = m
            .stats
            .iter()
            .filter(|(k, _)| {
                k.as_str() != crate::artifact::readers::NOT_RUN && k.as_str() != "config"
            })
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{stage}</td><td>{:.2}</td><td class=\"l\">{}</td><td class=\"l\"><code>{}</code></td><td class=\"l\">{} (format {})</td><td class=\"l\">{}</td></tr>",
            m.seconds,
            esc(&rows.join(", ")),
            &m.config_hash[..12.min(m.config_hash.len())],
            esc(&m.tool_version),
            m.format_version,
            esc(&notes.join("; "))
        );
    }
}

/// "Since the last run" and a trend line per variant (dev packed recall over the last
/// [`TREND_RUNS`] recorded runs), from the run history; empty before a second run.
fn history_section(store: &Store) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Point {
        run_id: String,
        variant: String,
        split: String,
        packed_recall: Option<f64>,
    }
    let Some(since) = crate::report::compare::since_last_run(store)? else {
        return Ok(String::new());
    };
    let mut h = format!(
        "<h2>Since the last run</h2>\n<pre>{}</pre>\n<p class=\"note\">In full: <code>ri-batch compare {d}@last~1 {d}@last</code>.</p>\n",
        esc(&since),
        d = esc(&store.root().display().to_string())
    );
    let points: Vec<Point> = store.read_as(crate::artifact::history::SUMMARY)?;
    let mut runs: Vec<&str> = points.iter().map(|p| p.run_id.as_str()).collect();
    runs.sort_unstable();
    runs.dedup();
    let runs = &runs[runs.len().saturating_sub(TREND_RUNS)..];
    let mut by_variant: BTreeMap<&str, Vec<(usize, f64)>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.split == "dev") {
        if let (Some(i), Some(y)) = (runs.iter().position(|r| *r == p.run_id), p.packed_recall) {
            by_variant.entry(&p.variant).or_default().push((i, y));
        }
    }
    let _ = write!(
        h,
        "<h3>Trend: dev packed recall over the last {} runs</h3>\n<table class=\"trend\"><tr><th class=\"l\">variant</th><th>trend</th><th>first</th><th>last</th></tr>\n",
        runs.len()
    );
    let (w, ht) = (160.0, 24.0);
    for (variant, mut pts) in by_variant {
        pts.sort_by_key(|(i, _)| *i);
        let x = |i: usize| 2.0 + (w - 4.0) * i as f64 / (runs.len().max(2) - 1) as f64;
        let line: Vec<String> = pts
            .iter()
            .map(|(i, y)| format!("{:.1},{:.1}", x(*i), ht - 2.0 - (ht - 4.0) * y))
            .collect();
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td><svg width=\"{w}\" height=\"{ht}\" role=\"img\"><polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/></svg></td><td>{:.1}%</td><td>{:.1}%</td></tr>",
            esc(variant),
            line.join(" "),
            100.0 * pts[0].1,
            100.0 * pts[pts.len() - 1].1
        );
    }
    h.push_str("</table>\n");
    Ok(h)
}

/// How many recorded runs the report's trend lines cover.
const TREND_RUNS: usize = 30;

/// The report's file name in the output directory.
pub const FILE: &str = "report.html";

/// Writes `<dir>/report.html` and returns its path.
pub fn write(dir: &Path) -> Result<PathBuf> {
    let page = html(dir)?;
    let path = dir.join(FILE);
    write_atomic(&path, page.as_bytes())?;
    Ok(path)
}
/// A table of one metric's mean per variant and repository (the revisions of a repository
/// together), for the rows of `split` that have it; nothing when none has.
fn per_repository(
    h: &mut String,
    evaluation: &[EvaluationRow],
    rows: &[&SummaryRow],
    split: &str,
    title: &str,
    metric: impl Fn(&EvaluationRow) -> Option<f64>,
) {
    let mut by: BTreeMap<(&str, &str), (f64, usize)> = BTreeMap::new();
    let mut repos: Vec<&str> = Vec::new();
    for e in evaluation.iter().filter(|e| e.split == split) {
        if let Some(r) = metric(e) {
            let repo = e.repo.group();
            let x = by.entry((e.variant.as_str(), repo)).or_default();
            x.0 += r;
            x.1 += 1;
            if !repos.contains(&repo) {
                repos.push(repo);
            }
        }
    }
    repos.sort();
    if repos.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h3>{title} per repository ({})</h3>\n<table class=\"repos\"><tr><th class=\"l\">variant</th>",
        esc(split)
    );
    for r in &repos {
        let _ = write!(h, "<th>{}</th>", esc(r));
    }
    h.push_str("</tr>\n");
    for s in rows.iter().filter(|s| s.status == VariantStatus::Ok) {
        let _ = write!(h, "<tr><td class=\"l\">{}</td>", esc(&s.variant));
        for r in &repos {
            let v = by
                .get(&(s.variant.as_str(), *r))
                .map(|(sum, n)| sum / *n as f64);
            h.push_str(&format!(
                "<td>{}</td>",
                v.map_or("–".into(), |v| format!("{v:.2}"))
            ));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}
