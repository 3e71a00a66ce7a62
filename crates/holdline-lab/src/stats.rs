//! Medians of repeated runs (`holdline bench --repeat N`): field by field over JSON figures,
//! and a figure's spread (median, min, max, every run's value).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::runner::median;

/// One figure over the runs of a repeated measurement.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Spread {
    /// Median of the runs (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest value of a run.
    pub min: f64,
    /// Largest value of a run.
    pub max: f64,
    /// Every run's value, in run order.
    pub values: Vec<f64>,
}

impl Spread {
    /// The spread of `values` (all 0 when empty).
    pub(crate) fn of(values: &[f64]) -> Self {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Self {
            median: median(values.to_vec()),
            min: if min.is_finite() { min } else { 0.0 },
            max: if max.is_finite() { max } else { 0.0 },
            values: values.to_vec(),
        }
    }

    /// `median` with `decimals` decimals and, over more than one run, ` (min–max)`; numbers
    /// of 1,000 and more get thousands separators.
    pub(crate) fn text(&self, decimals: usize) -> String {
        let m = num_text(self.median, decimals);
        if self.values.len() > 1 {
            format!(
                "{m} ({}–{})",
                num_text(self.min, decimals),
                num_text(self.max, decimals)
            )
        } else {
            m
        }
    }
}

/// `x` with `decimals` decimals and thousands separators in its integer part.
pub(crate) fn num_text(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let (sign, rest) = s.strip_prefix('-').map_or(("", s.as_str()), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// The field-by-field median of the same JSON figures of several runs: numbers become their
/// median (over the runs where they are numbers; `null` where none is), flags named
/// `*lower_bound` are true when any run's is ("at least" holds for the median then too),
/// other flags only when every run's is, arrays of one length are merged element by element,
/// objects key by key (the first run's keys), anything else is the first run's. One run's
/// figures come back unchanged.
pub(crate) fn median_json(runs: &[&Value]) -> Value {
    merge(runs, "")
}

fn merge(runs: &[&Value], key: &str) -> Value {
    let Some(first) = runs.first() else {
        return Value::Null;
    };
    if runs.len() == 1 {
        return (*first).clone();
    }
    match first {
        Value::Number(_) | Value::Null => {
            let nums: Vec<f64> = runs.iter().filter_map(|v| v.as_f64()).collect();
            if nums.is_empty() {
                Value::Null
            } else {
                let m = median(nums);
                let integral = runs.iter().all(|v| v.is_null() || v.is_u64());
                if integral && m.fract() == 0.0 && m >= 0.0 {
                    Value::from(m as u64)
                } else {
                    Value::from(m)
                }
            }
        }
        Value::Bool(_) => {
            let mut flags = runs.iter().filter_map(|v| v.as_bool());
            let b = if key.ends_with("lower_bound") {
                flags.any(|b| b)
            } else {
                flags.all(|b| b)
            };
            Value::Bool(b)
        }
        Value::Array(a) => {
            let same_len = runs
                .iter()
                .all(|v| v.as_array().is_some_and(|x| x.len() == a.len()));
            if !same_len {
                return (*first).clone();
            }
            Value::Array(
                (0..a.len())
                    .map(|i| {
                        let col: Vec<&Value> = runs.iter().filter_map(|v| v.get(i)).collect();
                        merge(&col, key)
                    })
                    .collect(),
            )
        }
        Value::Object(o) => {
            let mut out = Map::new();
            for k in o.keys() {
                let col: Vec<&Value> = runs.iter().filter_map(|v| v.get(k)).collect();
                out.insert(k.clone(), merge(&col, k));
            }
            Value::Object(out)
        }
        Value::String(_) => (*first).clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_run_comes_back_unchanged() {
        let v = json!({"a": 1.5, "b": [1, 2], "c": {"lower_bound": false, "x": null}, "s": "t"});
        assert_eq!(median_json(&[&v]), v);
    }

    #[test]
    fn numbers_flags_arrays_and_objects_merge_field_by_field() {
        let a = json!({"cps": 100, "r": 0.5, "lower_bound": false, "clean": true,
                       "pts": [{"g": 1.0}, {"g": 4.0}], "opt": null, "name": "holdline"});
        let b = json!({"cps": 300, "r": 0.7, "lower_bound": true, "clean": true,
                       "pts": [{"g": 3.0}, {"g": 2.0}], "opt": 5.0, "name": "holdline"});
        let c = json!({"cps": 200, "r": 0.6, "lower_bound": false, "clean": false,
                       "pts": [{"g": 2.0}, {"g": 6.0}], "opt": 7.0, "name": "holdline"});
        let m = median_json(&[&a, &b, &c]);
        assert_eq!(m["cps"], json!(200));
        assert!((m["r"].as_f64().unwrap_or(0.0) - 0.6).abs() < 1e-12);
        assert_eq!(m["lower_bound"], json!(true), "any run's lower bound");
        assert_eq!(m["clean"], json!(false), "clean only when every run is");
        assert_eq!(m["pts"], json!([{"g": 2.0}, {"g": 4.0}]));
        assert_eq!(m["opt"], json!(6.0), "median of the runs that have it");
        assert_eq!(m["name"], json!("holdline"));
    }

    #[test]
    fn spread_and_its_text() {
        let s = Spread::of(&[6730.0, 5910.0, 7180.0]);
        assert_eq!((s.median, s.min, s.max), (6730.0, 5910.0, 7180.0));
        assert_eq!(s.text(0), "6,730 (5,910–7,180)");
        assert_eq!(Spread::of(&[0.9991]).text(4), "0.9991");
        assert_eq!(Spread::of(&[]).median, 0.0);
        assert_eq!(num_text(-1234567.891, 1), "-1,234,567.9");
        assert_eq!(num_text(999.0, 0), "999");
    }
}
