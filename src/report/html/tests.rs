use super::*;

#[test]
fn text_from_studies_and_hosts_is_escaped() {
    assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;".to_string());
    assert_eq!(slug("hc-0a1:x y"), "hc-0a1-x-y");
}

#[test]
fn rows_read_top_down_and_ticks_drop_trailing_zeros() {
    let labels = vec!["first".to_string(), "second".to_string()];
    assert_eq!(row_label(&labels, row_y(2, 0)), "first");
    assert_eq!(row_label(&labels, row_y(2, 1)), "second");
    assert_eq!(row_label(&labels, 0.5), "");
    assert_eq!(row_label(&labels, 2.0), "");
    assert_eq!(tick(0.1), "0.1");
    assert_eq!(tick(20.0), "20");
    assert_eq!(tick(1.25), "1.25");
}

#[test]
fn a_chart_gets_its_id_title_and_tooltips() {
    let svg = chart("c-1", "chart-x", "a <title>", 100, |root| {
        let mut ch = ChartBuilder::on(root)
            .build_cartesian_2d(0.0..1.0, 0.0..1.0)
            .map_err(|e| e.to_string())?;
        ch.draw_series([Circle::new((0.5, 0.5), 3, BLACK.filled())])
            .map_err(|e| e.to_string())?;
        Ok(vec![Tip {
            at: ch.backend_coord(&(0.5, 0.5)),
            text: "n = 3 & more".to_string(),
        }])
    });
    assert!(
        svg.starts_with("<svg id=\"c-1\" class=\"chart chart-x\""),
        "{svg}"
    );
    assert!(svg.contains("<title>a &lt;title&gt;</title>"), "{svg}");
    assert!(
        svg.contains("<title>n = 3 &amp; more</title></circle></g></svg>"),
        "{svg}"
    );
    assert_eq!(svg.matches("<svg").count(), 1);
}

#[test]
fn bounds_pad_and_skip_what_is_not_finite() {
    assert_eq!(bounds([f64::NAN]), None);
    let (lo, hi) = bounds([1.0, 2.0, f64::INFINITY]).expect("bounds");
    assert!(lo < 1.0 && hi > 2.0 && hi < 3.0);
    let (lo, hi) = bounds([5.0]).expect("one value");
    assert!(lo < 5.0 && hi > 5.0);
}
