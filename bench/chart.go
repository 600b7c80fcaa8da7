package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = []color.Color{
	color.RGBA{0x4c, 0x72, 0xb0, 0xff},
	color.RGBA{0xdd, 0x84, 0x52, 0xff},
	color.RGBA{0x55, 0xa8, 0x68, 0xff},
	color.RGBA{0xc4, 0x4e, 0x52, 0xff},
}

// series is one set of bars of a grouped bar chart.
type series struct {
	name   string
	values []float64
}

// barPlot draws grouped bars: one group per category, one bar per series.
func barPlot(title, ylabel string, categories []string, ss []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	width := vg.Points(60 / float64(max(len(ss), 1)))
	for i, s := range ss {
		bars, err := plotter.NewBarChart(plotter.Values(s.values), width)
		if err != nil {
			return nil, err
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[i%len(palette)]
		bars.Offset = vg.Length(float64(i)-float64(len(ss)-1)/2) * width
		p.Add(bars)
		if len(ss) > 1 {
			p.Legend.Add(s.name, bars)
		}
	}
	p.NominalX(categories...)
	// Room above the tallest bar for the legend.
	top := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	p.Y.Max = top * 1.3
	return p, nil
}

// chart writes a PNG with one panel per workload that was run.
func chart(res *results, path string) error {
	var panels []*plot.Plot
	if res.Throughput != nil || res.GroupThroughput != nil {
		var cats []string
		var ss, cpu []series
		for _, t := range []*drainTable{res.Throughput, res.GroupThroughput} {
			if t == nil {
				continue
			}
			if cats == nil {
				for _, r := range t.Rows {
					cats = append(cats, r.Contender)
				}
			}
			name := fmt.Sprintf("%d instance(s)", t.Instances)
			s, c := series{name: name}, series{name: name}
			for _, cat := range cats {
				if r := t.row(cat); r != nil {
					s.values = append(s.values, r.MsgsPerSec/1000)
					c.values = append(c.values, r.CPUPerMsgUs)
				} else {
					s.values = append(s.values, 0)
					c.values = append(c.values, 0)
				}
			}
			ss, cpu = append(ss, s), append(cpu, c)
		}
		n := res.Throughput
		if n == nil {
			n = res.GroupThroughput
		}
		p, err := barPlot(fmt.Sprintf("Throughput, %d × %d B, %d partitions", n.Messages, n.Size, n.Partitions),
			"thousand msgs/s (higher is better)", cats, ss)
		if err != nil {
			return err
		}
		panels = append(panels, p)
		if p, err = barPlot("CPU per message", "µs of CPU time (lower is better)", cats, cpu); err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if t := res.Rebalance; t != nil {
		var ss []series
		for _, r := range t.Rows {
			s := series{name: r.Contender}
			for _, ev := range events {
				s.values = append(s.values, r.Events[ev].Recovery)
			}
			ss = append(ss, s)
		}
		p, err := barPlot(fmt.Sprintf("Rebalance recovery, %d partitions", t.Partitions),
			"seconds (lower is better)", []string{"join", "leave (Close)", "kill -9"}, ss)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	// A panel of one figure per contender: cats and values in the order of
	// the table's rows.
	onePerContender := func(title, ylabel, name string, cats []string, values []float64) error {
		p, err := barPlot(title, ylabel, cats, []series{{name: name, values: values}})
		if err == nil {
			panels = append(panels, p)
		}
		return err
	}
	if t := res.Startup; t != nil {
		var cats []string
		var values []float64
		for _, r := range t.Rows {
			cats, values = append(cats, r.Contender), append(values, r.Seconds)
		}
		if err := onePerContender(fmt.Sprintf("Start-up, %d partitions", t.Partitions),
			"seconds to every partition's 1st message", "start-up", cats, values); err != nil {
			return err
		}
	}
	if t := res.MassMove; t != nil {
		var cats []string
		var values []float64
		for _, r := range t.Rows {
			cats, values = append(cats, r.Contender), append(values, r.Recovery)
		}
		if err := onePerContender(fmt.Sprintf("Mass move: a 2nd instance joins, %d partitions", t.Partitions),
			"seconds until every partition consumed again", "mass move", cats, values); err != nil {
			return err
		}
	}
	if len(panels) == 0 {
		return nil
	}
	cols := min(2, len(panels))
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Length(cols)*6*vg.Inch, vg.Length(rows)*4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 3, PadY: vg.Inch / 3,
		PadTop: vg.Inch / 6, PadBottom: vg.Inch / 6, PadLeft: vg.Inch / 6, PadRight: vg.Inch / 6}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
