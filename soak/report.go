package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// summary is the report's table, as Markdown.
func (so *soak) summary(r *soakcheck.Report, caughtUp bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| seed | faults | messages | lost | duplicates | double-owned deliveries | offsets moved back | commits past an unacked message | poll skips | outside a hold | slowest recovery |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	n, slowest := 0, time.Duration(0)
	for kind, c := range so.faults {
		n += c
		slowest = max(slowest, so.recoveries[kind])
	}
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n", so.s.seed, n, r.Produced, r.Lost, r.Duplicates,
		r.DoubleOwned, r.MovedBack, r.PastUnacked, r.PollSkips, r.NotHeld, slowest.Round(100*time.Millisecond))
	if so.s.migrating() {
		fmt.Fprintf(&b, "\n| fault | injected | with a switch under it | slowest recovery (heal to stable) |\n|---|---|---|---|\n")
		for _, f := range so.kinds {
			under := fmt.Sprint(so.under[f.kind])
			if noSwitchUnder[f.kind] {
				under = "(switches itself)"
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", f.kind, so.faults[f.kind], under, so.recoveries[f.kind].Round(100*time.Millisecond))
		}
		b.WriteString(so.switchSummary())
	} else {
		fmt.Fprintf(&b, "\n| fault | injected | slowest recovery (heal to stable) |\n|---|---|---|\n")
		for _, f := range so.kinds {
			fmt.Fprintf(&b, "| %s | %d | %s |\n", f.kind, so.faults[f.kind], so.recoveries[f.kind].Round(100*time.Millisecond))
		}
	}
	b.WriteString(so.checksSummary(r)) // checks.go
	if len(r.DuplicatesByCause) > 0 {
		causes := make([]string, 0, len(r.DuplicatesByCause))
		for c := range r.DuplicatesByCause {
			causes = append(causes, c)
		}
		sort.Strings(causes)
		fmt.Fprintf(&b, "\nDuplicates by the last fault before them:")
		for _, c := range causes {
			fmt.Fprintf(&b, " %s %d;", c, r.DuplicatesByCause[c])
		}
		b.WriteString("\n")
	}
	if !caughtUp {
		fmt.Fprintf(&b, "\nThe group did not consume everything within 2 minutes of the last fault.\n")
	}
	for _, u := range so.unstable {
		fmt.Fprintf(&b, "\nNot stable: %s\n", u)
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "\nViolations (at most 10 of each kind):\n\n")
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "- %s\n", v)
		}
	} else {
		fmt.Fprintf(&b, "\nNo violation.\n")
	}
	return b.String()
}

// switchSummary says how often the group's switch was flipped, and what
// the tool refused or failed, as Markdown.
func (so *soak) switchSummary() string {
	so.mu.Lock()
	defer so.mu.Unlock()
	c := so.switches
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe group's switch: %d times to Kafka, %d back to ZooKeeper (%d of them under another fault); the tool refused %d times and failed %d times.\n",
		c.toKafka, c.back, c.under, len(c.refused), len(c.failed))
	for _, r := range c.refused {
		fmt.Fprintf(&b, "\n- refused %s\n", r)
	}
	for _, f := range c.failed {
		fmt.Fprintf(&b, "\n- failed %s\n", f)
	}
	return b.String()
}

// writeReport writes report.md and timeline.png.
func (so *soak) writeReport(events []soakcheck.Event, r *soakcheck.Report, caughtUp bool) error {
	var b strings.Builder
	shape := "3 ZooKeeper nodes, 3 brokers"
	if so.s.consumerProtocol() {
		shape = "3 KRaft brokers"
	}
	fmt.Fprintf(&b, "# Soak report\n\n`SOAK_SEED=%d SOAK_DURATION=%s SOAK_COORDINATOR=%s make soak`: %d consumer instances, %d msg/s, %s (replication 3), session timeout %s.\n",
		so.s.seed, so.s.duration, so.s.coordinator, so.s.instances, so.s.rate, shape, sessionTimeout)
	switch {
	case so.s.kafkaCoordinated():
		b.WriteString("\nThe group is coordinated by Kafka's group coordinator (Config.Coordinator CoordinatorKafka); the instances have no ZooKeeper connection.\n")
	case so.s.consumerProtocol():
		b.WriteString(so.consumerReport())
	case so.s.migrating():
		b.WriteString("\nThe instances run with Config.Coordinator CoordinatorZooKeeper and follow the group's coordinator switch, which `kafkaconsumer-groups migrate` flips to Kafka and back, alone and under the other faults; extra instances join with the other setting.")
		if so.s.nonFollowers {
			b.WriteString(" SOAK_NONFOLLOWERS=1: a CoordinatorKafka instance joins while the switch says zookeeper.")
		}
		if so.s.original {
			b.WriteString(" SOAK_ORIGINAL=1: an instance registers as the original does while the switch says kafka.")
		}
		b.WriteString("\n")
	}
	b.WriteString(so.summary(r, caughtUp))
	b.WriteString("\n![timeline](timeline.png)\n\nThe timeline: one row per partition, colored by the instance that handed it out (a bar from its first to its last delivery of each hold); faults as red lines, heals as green.\n")
	if err := os.WriteFile(filepath.Join(so.s.dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return writeTimeline(filepath.Join(so.s.dir, "timeline.png"), events)
}

var instanceColors = []color.RGBA{
	{0x4c, 0x72, 0xb0, 0xff}, {0xdd, 0x84, 0x52, 0xff}, {0x55, 0xa8, 0x68, 0xff},
	{0x81, 0x72, 0xb3, 0xff}, {0x93, 0x78, 0x60, 0xff}, {0xda, 0x8b, 0xc3, 0xff},
	{0x8c, 0x8c, 0x8c, 0xff}, {0xcc, 0xb9, 0x74, 0xff},
}

// writeTimeline draws the partitions' holders over time, with the faults.
func writeTimeline(path string, events []soakcheck.Event) error {
	type key struct {
		topic string
		part  int32
	}
	type span struct {
		inst     string
		from, to int64
	}
	spans := make(map[key][]span)
	open := make(map[key]map[string]*span)
	var marks []soakcheck.Event
	var start, end int64
	instances := make(map[string]int)
	for _, e := range sortedByTime(events) {
		if e.Kind == soakcheck.Produced {
			continue
		}
		if start == 0 {
			start = e.Time
		}
		end = max(end, e.Time)
		k := key{e.Topic, e.Partition}
		switch e.Kind {
		case soakcheck.Fault, soakcheck.Healed:
			marks = append(marks, e)
		case soakcheck.Assigned, soakcheck.Revoked:
			if sp := open[k][e.Instance]; sp != nil {
				if sp.to != 0 {
					spans[k] = append(spans[k], *sp)
				}
				delete(open[k], e.Instance)
			}
		case soakcheck.Delivered:
			if _, ok := instances[e.Instance]; !ok {
				instances[e.Instance] = len(instances)
			}
			if open[k] == nil {
				open[k] = make(map[string]*span)
			}
			sp := open[k][e.Instance]
			if sp == nil {
				sp = &span{inst: e.Instance, from: e.Time}
				open[k][e.Instance] = sp
			}
			sp.to = e.Time
		}
	}
	for k, m := range open {
		for _, sp := range m {
			spans[k] = append(spans[k], *sp)
		}
	}
	keys := make([]key, 0, len(spans))
	for k := range spans {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].topic < keys[j].topic || keys[i].topic == keys[j].topic && keys[i].part < keys[j].part
	})
	const left, right, top, rowH = 90, 20, 30, 14
	width := 1400
	height := top + rowH*len(keys) + 40
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	x := func(t int64) int {
		if end <= start {
			return left
		}
		return left + int(float64(t-start)/float64(end-start)*float64(width-left-right))
	}
	label := func(s string, px, py int, c color.Color) {
		d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(px, py)}
		d.DrawString(s)
	}
	for row, k := range keys {
		y := top + row*rowH
		label(fmt.Sprintf("%s/%d", k.topic, k.part), 2, y+rowH-1, color.Black)
		for _, sp := range spans[k] {
			c := instanceColors[instances[sp.inst]%len(instanceColors)]
			draw.Draw(img, image.Rect(x(sp.from), y+1, max(x(sp.to), x(sp.from)+1), y+rowH-1), image.NewUniform(c), image.Point{}, draw.Src)
		}
	}
	for _, m := range marks {
		c := color.RGBA{0xd0, 0x20, 0x20, 0xff}
		if m.Kind == soakcheck.Healed {
			c = color.RGBA{0x20, 0xa0, 0x20, 0xff}
		}
		px := x(m.Time)
		for y := top - 5; y < top+rowH*len(keys); y++ {
			img.Set(px, y, c)
		}
	}
	names := make([]string, 0, len(instances))
	for n := range instances {
		names = append(names, n)
	}
	sort.Strings(names)
	px := left
	for _, n := range names {
		c := instanceColors[instances[n]%len(instanceColors)]
		draw.Draw(img, image.Rect(px, 8, px+12, 20), image.NewUniform(c), image.Point{}, draw.Src)
		label(n, px+15, 19, color.Black)
		px += 60
	}
	label(fmt.Sprintf("%s; red: fault, green: heal", time.Duration(end-start).Round(time.Second)), px+10, 19, color.Black)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func sortedByTime(events []soakcheck.Event) []soakcheck.Event {
	s := append([]soakcheck.Event(nil), events...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Time < s[j].Time })
	return s
}
