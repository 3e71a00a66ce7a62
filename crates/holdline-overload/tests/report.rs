//! Prints how the local controllers behave in the virtual-clock server model; the numbers in
//! `docs/overload-controllers.md` come from here:
//!
//! ```sh
//! cargo test -p holdline-overload --test report -- --ignored --nocapture
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

mod support;

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{
    ControllerFactory, NoControlConfig, OccConfig, QueueDelayConfig, QueueLimitConfig,
};
use support::Model;

const SEC: Duration = Duration::from_secs(1);

fn configs() -> Vec<(&'static str, Box<dyn ControllerFactory>)> {
    vec![
        ("occ", Box::new(OccConfig::default())),
        (
            "occ+queue_growth",
            Box::new(OccConfig {
                queue_growth: true,
                ..OccConfig::default()
            }),
        ),
        ("queue-delay", Box::new(QueueDelayConfig::default())),
    ]
}

#[test]
#[ignore = "prints a report"]
fn report() {
    println!("1,000 calls/s server, rejections free, offered R x capacity from t = 0 for 40 s");
    println!(
        "algorithm        | R  | peak delay | settled after | f (last 20 s) | utilisation | good calls/s"
    );
    for (name, config) in configs() {
        for ratio in [2.0, 5.0, 10.0] {
            let mut c = config.build(Instant::ZERO, Rng::seed_from_u64(1)).unwrap();
            let mut m = Model::new(1000.0, 0.0, 2);
            let mut peak = Duration::ZERO;
            let mut settled = None;
            let mut good = 0;
            let mut tail = Vec::new();
            let mut util = 0.0;
            for sec in 0..40u32 {
                let s = m.run(c.as_mut(), ratio * 1000.0, SEC);
                peak = peak.max(s.max_delay);
                if settled.is_none() && s.max_delay < Duration::from_millis(100) {
                    settled = Some(sec);
                }
                if sec >= 20 {
                    good += s.good;
                    tail.push(s.mean_acceptance());
                    util += s.utilisation(SEC) / 20.0;
                }
            }
            let f = tail.iter().sum::<f64>() / tail.len() as f64;
            println!(
                "{name:16} | {ratio:2} | {:>8.0} ms | {:>11} s | {f:>13.3} | {util:>11.3} | {:>12.0}",
                peak.as_secs_f64() * 1000.0,
                settled.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                good as f64 / 20.0
            );
        }
    }
    for reject_cost in [0.0, 0.05] {
        println!();
        println!(
            "40 s at 10x from t = 0, a rejection costing {:.0} % of a call: good calls (waited < 500 ms) / capacity",
            reject_cost * 100.0
        );
        let mut all = configs();
        all.push(("none", Box::new(NoControlConfig)));
        all.push(("queue-limit(100)", Box::new(QueueLimitConfig::default())));
        for (name, config) in all {
            let mut c = config.build(Instant::ZERO, Rng::seed_from_u64(1)).unwrap();
            let mut m = Model::new(1000.0, reject_cost, 2);
            let s = m.run(c.as_mut(), 10_000.0, 40 * SEC);
            let last = m.run(c.as_mut(), 10_000.0, 20 * SEC);
            println!(
                "{name:16} | first 40 s {:>5.1} % | next 20 s {:>5.1} %",
                s.good as f64 / 40_000.0 * 100.0,
                last.good as f64 / 20_000.0 * 100.0
            );
        }
    }
}
