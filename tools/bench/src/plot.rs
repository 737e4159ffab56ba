//! PNG plots (plotters, bitmap backend; text through ab_glyph with DejaVu
//! Sans loaded at run time): decode tok/s retention by scenario and
//! scheduler, and the CDF of the agent's local tail.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{Results, Summary};
use super::{Scenario, Sched, Workload};

/// The files `draw_all` writes, in report order.
pub const FILES: &[&str] = &["tokps-retention.png", "agent-tail-cdf.png"];

const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers DejaVu Sans (or $SCX_EXPRESS_FONT) as plotters' sans-serif.
fn load_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let path = std::env::var_os("SCX_EXPRESS_FONT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_FONT));
        let bytes = std::fs::read(&path).map_err(|e| {
            format!(
                "the plots need a TrueType font: {}: {e}; install it with \
                 `apt-get install fonts-dejavu-core`, or point SCX_EXPRESS_FONT at a .ttf file",
                path.display()
            )
        })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        for style in [FontStyle::Normal, FontStyle::Bold] {
            plotters::style::register_font("sans-serif", style, bytes)
                .map_err(|_| format!("{}: not a usable TrueType font", path.display()))?;
        }
        Ok(())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

fn color(s: Sched) -> RGBColor {
    match s {
        Sched::Eevdf => RGBColor(30, 30, 30),
        Sched::EevdfNice => RGBColor(140, 140, 140),
        Sched::EevdfFifo => RGBColor(150, 100, 50),
        Sched::EevdfProbes => RGBColor(90, 90, 170),
        Sched::Express => RGBColor(215, 40, 40),
        Sched::Rustland => RGBColor(40, 100, 215),
        Sched::Bpfland => RGBColor(40, 160, 70),
        Sched::Lavd => RGBColor(150, 60, 190),
        Sched::Cosmos => RGBColor(240, 150, 20),
    }
}

/// Draws every plot into `dir`; returns (file, title) pairs.
pub fn draw_all(r: &Results, dir: &Path) -> Result<Vec<(String, String)>> {
    load_font()?;
    let t1 = "Decode tok/s retention: scenario ÷ the same scheduler's baseline";
    retention(r, &dir.join(FILES[0]), t1).context("drawing the retention plot")?;
    let t2 = "Agent local tail: CDF per scenario";
    tail_cdf(r, &dir.join(FILES[1]), t2).context("drawing the tail CDF")?;
    Ok(vec![
        (FILES[0].into(), t1.into()),
        (FILES[1].into(), t2.into()),
    ])
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

fn font(size: f64) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&BLACK)
}

/// Grouped bars: x = noisy scenarios, one bar per scheduler (median ratio),
/// whiskers = each repeat ÷ the baseline median. One panel per workload
/// (decode, mixed) in the plan.
fn retention(r: &Results, path: &Path, title: &str) -> Result<()> {
    let p = &r.plan;
    let scens: Vec<Scenario> = p
        .scenarios
        .iter()
        .copied()
        .filter(|s| *s != Scenario::Baseline)
        .collect();
    let wls: Vec<Workload> = [Workload::Decode, Workload::Mixed]
        .into_iter()
        .filter(|w| p.workloads.contains(w))
        .collect();
    let panel_h = 520;
    let h = 70 + panel_h * wls.len().max(1) as u32;
    let w = (260 + 70 * scens.len().max(1) * p.schedulers.len().max(1)).clamp(900, 2400) as u32;
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, font(26.0)).map_err(err)?;
    if scens.is_empty() || wls.is_empty() {
        note(&root, "no decode or mixed cells under noise in this plan")?;
        return root.present().map_err(err);
    }
    let panels = root.split_evenly((wls.len(), 1));
    for (area, &wl) in panels.iter().zip(&wls) {
        retention_panel(area, r, wl, &scens)?;
    }
    root.present().map_err(err)
}

/// A bar of the retention plot: (scheduler index, scenario index, median
/// ratio, range of the per-repeat ratios).
type Bar = (usize, usize, f64, Option<Summary>);

/// The bars of one workload's panel, and the largest ratio among them
/// (at least 1.2).
fn retention_bars(r: &Results, wl: Workload, scens: &[Scenario]) -> (Vec<Bar>, f64) {
    let mut bars = vec![];
    let mut ymax: f64 = 1.2;
    for (si, &s) in r.plan.schedulers.iter().enumerate() {
        let base = r
            .get(s, Scenario::Baseline, wl, "tok_s")
            .map(|a| a.summary.median);
        for (ci, &c) in scens.iter().enumerate() {
            let (Some(b), Some(a)) = (base, r.get(s, c, wl, "tok_s")) else {
                continue;
            };
            if b <= 0.0 {
                continue;
            }
            let reps: Vec<f64> = a.summary.values.iter().map(|v| v / b).collect();
            let med = a.summary.median / b;
            ymax = reps.iter().copied().fold(ymax, f64::max).max(med);
            bars.push((si, ci, med, Summary::of(&reps)));
        }
    }
    (bars, ymax)
}

/// A panel with linear f64 axes.
type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One workload's panel of the retention plot.
fn retention_panel(
    area: &DrawingArea<BitMapBackend, Shift>,
    r: &Results,
    wl: Workload,
    scens: &[Scenario],
) -> Result<()> {
    let (bars, ymax) = retention_bars(r, wl, scens);
    let ymax = (ymax * 1.15).min(10.0);
    let n = scens.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            match wl {
                Workload::Mixed => "mixed: decode + CPU-bound helper threads in one process",
                _ => "decode stand-in",
            },
            font(20.0),
        )
        .margin(15)
        .margin_bottom(45)
        .x_label_area_size(10)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("tok/s ÷ own baseline (median; whiskers: repeats)")
        .y_label_style(font(16.0))
        .axis_desc_style(font(16.0))
        .draw()
        .map_err(err)?;
    draw_retention_bars(&mut chart, &r.plan.schedulers, &bars)?;
    // Retention 1.0: as fast as without noise.
    chart
        .draw_series(LineSeries::new(
            [(0.0, 1.0), (n, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(font(16.0))
        .draw()
        .map_err(err)?;
    // Scenario names under their groups (backend_coord is absolute,
    // the area draws relative to its own corner).
    let (bx, by) = area.get_base_pixel();
    for (ci, c) in scens.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(ci as f64 + 0.5, 0.0));
        let style = font(20.0).pos(Pos::new(HPos::Center, VPos::Top));
        area.draw(&Text::new(c.name(), (px - bx, py - by + 10), style))
            .map_err(err)?;
    }
    Ok(())
}

/// Each scheduler's bars (one legend entry per scheduler) and their
/// whiskers.
fn draw_retention_bars(chart: &mut Chart, schedulers: &[Sched], bars: &[Bar]) -> Result<()> {
    let k = schedulers.len() as f64;
    let bw = 0.8 / k;
    for (si, &s) in schedulers.iter().enumerate() {
        let col = color(s);
        let mine: Vec<_> = bars.iter().filter(|b| b.0 == si).collect();
        chart
            .draw_series(mine.iter().map(|&&(_, ci, med, _)| {
                let x0 = ci as f64 + 0.1 + si as f64 * bw;
                Rectangle::new([(x0 + 0.1 * bw, 0.0), (x0 + 0.9 * bw, med)], col.filled())
            }))
            .map_err(err)?
            .label(s.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
        for &&(_, ci, _, ref reps) in &mine {
            if let Some(rs) = reps {
                let xc = ci as f64 + 0.1 + (si as f64 + 0.5) * bw;
                let d = 0.2 * bw;
                let line = |pts: Vec<(f64, f64)>| PathElement::new(pts, BLACK.stroke_width(2));
                chart
                    .draw_series([
                        line(vec![(xc, rs.min), (xc, rs.max)]),
                        line(vec![(xc - d, rs.min), (xc + d, rs.min)]),
                        line(vec![(xc - d, rs.max), (xc + d, rs.max)]),
                    ])
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

fn note(area: &DrawingArea<BitMapBackend, Shift>, text: &str) -> Result<()> {
    let (w, h) = area.dim_in_pixel();
    let style = font(22.0).pos(Pos::new(HPos::Center, VPos::Center));
    area.draw(&Text::new(
        text.to_string(),
        (w as i32 / 2, h as i32 / 2),
        style,
    ))
    .map_err(err)
}

/// y of quantile q on a "nines" scale: 0.9 → 1, 0.99 → 2, ...
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-6).log10()
}

/// Mean of the quantile curves of a scheduler's repeats (same q grid).
fn pooled_cdf(r: &Results, s: Sched, c: Scenario) -> Vec<(f64, f64)> {
    let curves: Vec<&Vec<(f64, f64)>> = r
        .cells
        .iter()
        .filter(|x| x.ok && x.sched == s && x.scenario == c && x.workload == Workload::Agent)
        .map(|x| &x.measured.tail_cdf)
        .filter(|v| !v.is_empty())
        .collect();
    let Some(first) = curves.first() else {
        return vec![];
    };
    first
        .iter()
        .enumerate()
        .filter(|(_, (q, _))| *q < 1.0)
        .filter_map(|(i, (q, _))| {
            let vals: Vec<f64> = curves
                .iter()
                .filter_map(|cv| cv.get(i))
                .map(|p| p.1)
                .collect();
            (vals.len() == curves.len()).then(|| (*q, vals.iter().sum::<f64>() / vals.len() as f64))
        })
        .collect()
}

/// One panel per scenario: x = local tail (µs, log), y = quantile on a
/// nines scale, a line per scheduler (repeats pooled by averaging their
/// quantiles).
fn tail_cdf(r: &Results, path: &Path, title: &str) -> Result<()> {
    let p = &r.plan;
    let scens = &p.scenarios;
    let cols = scens.len().clamp(1, 3);
    let rows = scens.len().div_ceil(cols).max(1);
    let root =
        BitMapBackend::new(path, (620 * cols as u32, 70 + 480 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, font(26.0)).map_err(err)?;
    let curves: Vec<Curve> = scens
        .iter()
        .flat_map(|&c| p.schedulers.iter().map(move |&s| (c, s)))
        .map(|(c, s)| (c, s, pooled_cdf(r, s, c)))
        .filter(|(_, _, v)| !v.is_empty())
        .collect();
    if curves.is_empty() {
        note(&root, "no agent cells with tail quantiles in this run")?;
        return root.present().map_err(err);
    }
    let lo = curves
        .iter()
        .flat_map(|c| c.2.iter().map(|p| p.1))
        .fold(f64::MAX, f64::min)
        .max(1.0);
    let hi = curves
        .iter()
        .flat_map(|c| c.2.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        bail!("degenerate tail latencies ({lo}..{hi} µs)");
    }
    let ytop = curves
        .iter()
        .flat_map(|c| c.2.iter().map(|p| nines(p.0)))
        .fold(1.0, f64::max)
        + 0.2;
    let panels = root.split_evenly((rows, cols));
    for (area, &c) in panels.iter().zip(scens.iter()) {
        tail_panel(area, c, &curves, (lo, hi), ytop)?;
    }
    root.present().map_err(err)
}

/// A scheduler's pooled tail quantiles in one scenario.
type Curve = (Scenario, Sched, Vec<(f64, f64)>);

/// One scenario's panel of the tail CDF: x over `lo..hi` µs (log), y up to
/// `ytop` nines.
fn tail_panel(
    area: &DrawingArea<BitMapBackend, Shift>,
    c: Scenario,
    curves: &[Curve],
    (lo, hi): (f64, f64),
    ytop: f64,
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(c.name(), font(20.0))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo / 1.3..hi * 1.3).log_scale(), 0f64..ytop)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("local tail (µs)")
        .y_desc("fraction of steps")
        .x_label_style(font(14.0))
        .y_label_style(font(14.0))
        .axis_desc_style(font(15.0))
        .y_labels(ytop.floor() as usize + 1)
        .y_label_formatter(&nines_label)
        .x_label_formatter(&us_label)
        .draw()
        .map_err(err)?;
    for (_, s, pts) in curves.iter().filter(|x| x.0 == c) {
        let col = color(*s);
        let width = if *s == Sched::Express { 4 } else { 2 };
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(q, us)| (us, nines(q))),
                col.stroke_width(width),
            ))
            .map_err(err)?
            .label(s.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(font(14.0))
        .draw()
        .map_err(err)
}

/// The label of a whole number of nines on the y axis (1 → 0.9, ...);
/// none between them.
fn nines_label(y: &f64) -> String {
    let k = y.round();
    if (y - k).abs() > 1e-6 {
        return String::new();
    }
    match k as i32 {
        0 => "0".into(),
        1 => "0.9".into(),
        2 => "0.99".into(),
        3 => "0.999".into(),
        4 => "0.9999".into(),
        _ => String::new(),
    }
}

/// A tail in µs on the x axis: 800, 2k.
fn us_label(x: &f64) -> String {
    if *x >= 1000.0 {
        format!("{:.0}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_scale() {
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert!(nines(1.0).is_finite());
    }
}
