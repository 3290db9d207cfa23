package cpuwork

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/goroutine"
)

// What the goroutine identity (internal/goroutine's assembly) and the
// runtime's profiler-label hooks buy, against what a task carried in its
// context would cost instead. A Do and a Checkpoint find their task
// through the identity and the running table; carried in the context,
// Do would wrap fn's ctx in a value (an allocation) and Checkpoint would
// look the value up in the ctx it is given, one hop or, when fn wrapped
// it further, several. Run with:
//
//	go test -run '^$' -bench Identity -count 6 .

type identityKey struct{}

// requestCtx is a context chain like a net/http request's.
func requestCtx() (context.Context, context.CancelFunc) {
	type key int
	ctx := context.WithValue(context.Background(), key(0), "server")
	ctx = context.WithValue(ctx, key(1), "local addr")
	ctx, cancel := context.WithCancel(ctx)
	return context.WithValue(ctx, key(2), "conn"), cancel
}

// BenchmarkIdentityTable is what a Do and a Checkpoint pay to find their
// task: the identity and one lookup in the running table.
func BenchmarkIdentityTable(b *testing.B) {
	g := goroutine.ID()
	_, own, i := running.LookupOrClaim(g)
	if own == nil {
		b.Skip("bucket full")
	}
	t := own.claimed(g, i, context.Background(), nil, Interactive)
	defer t.leave()
	for b.Loop() {
		if cur, _ := running.Lookup(goroutine.ID()); cur != t {
			b.Fatal("lookup")
		}
	}
}

// BenchmarkIdentityContextWrap is what a Do would pay to carry its task
// in fn's ctx.
func BenchmarkIdentityContextWrap(b *testing.B) {
	ctx, cancel := requestCtx()
	defer cancel()
	t := &task{}
	b.ReportAllocs()
	for b.Loop() {
		if context.WithValue(ctx, identityKey{}, t) == nil {
			b.Fatal("nil")
		}
	}
}

// BenchmarkIdentityContextLookup is what a Checkpoint would pay to find
// its task in the ctx it is given: fn's own (one hop) or one fn wrapped
// with a deadline and a value of its own (three hops).
func BenchmarkIdentityContextLookup(b *testing.B) {
	base, cancel := requestCtx()
	defer cancel()
	t := &task{}
	direct := context.WithValue(base, identityKey{}, t)
	wrapped, cancel2 := context.WithTimeout(direct, time.Hour)
	defer cancel2()
	type key int
	wrapped = context.WithValue(wrapped, key(9), "fn's own")
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"direct", direct}, {"wrapped", wrapped}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if tc.ctx.Value(identityKey{}) != t {
					b.Fatal("lookup")
				}
			}
		})
	}
}

// BenchmarkIdentityLabelsHooks is what a task's profiler labels cost
// through the runtime's hooks: read the goroutine's set, store the
// class's precomputed one, put the old one back.
func BenchmarkIdentityLabelsHooks(b *testing.B) {
	e := newExec(b, Options{Slots: 1})
	for b.Loop() {
		old := goroutine.ProfLabels()
		goroutine.SetProfLabels(e.classLabels[Interactive])
		goroutine.SetProfLabels(old)
	}
}

// BenchmarkIdentityLabelsPprof is the same through runtime/pprof's API:
// it cannot read the goroutine's set, so it asks whether the submitter's
// ctx carries labels (a walk of its chain), sets the class's from a
// context and puts back the ctx's.
func BenchmarkIdentityLabelsPprof(b *testing.B) {
	classCtx := pprof.WithLabels(context.Background(), pprof.Labels(labelKey, Interactive.String()))
	ctx, cancel := requestCtx()
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		goroutine.HasLabels(ctx)
		pprof.SetGoroutineLabels(classCtx)
		pprof.SetGoroutineLabels(ctx)
	}
}
