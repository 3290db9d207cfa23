package cpuwork_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/cpuwork/cpuwork"
)

func ExampleNew() {
	// Zero Options: one slot per whole core of the CPU budget (cgroup quota
	// and affinity), following changes.
	e, err := cpuwork.New(cpuwork.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(context.Background())
	fmt.Println(e.Slots() >= 1)
	// Output: true
}

func ExampleExecutor_Do() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 2})
	defer e.Close(context.Background())

	var sum [32]byte
	err := e.Do(context.Background(), cpuwork.Interactive, func(ctx context.Context) error {
		sum = sha256.Sum256([]byte("hello")) // CPU-bound work, on this goroutine
		return nil
	})
	if errors.Is(err, cpuwork.ErrSaturated) {
		fmt.Println("shed: reply 503")
		return
	}
	fmt.Printf("%x\n", sum[:4])
	// Output: 2cf24dba
}

func ExampleFor() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 2})
	defer e.Close(context.Background())

	data := make([]float64, 100_000)
	for i := range data {
		data[i] = float64(i)
	}
	err := e.For(context.Background(), cpuwork.Batch, len(data), func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			data[i] *= 2
		}
		return nil
	})
	fmt.Println(err, data[99_999])
	// Output: <nil> 199998
}

func ExampleCheckpoint() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 1})
	defer e.Close(context.Background())

	err := e.Do(context.Background(), cpuwork.Batch, func(ctx context.Context) error {
		h := sha256.New()
		block := make([]byte, 4096)
		for i := 0; i < 1000; i++ {
			// Hands the slot to Critical work that waits, yields the P to
			// runnable goroutines and due timers, reports cancellation.
			if err := cpuwork.Checkpoint(ctx); err != nil {
				return err
			}
			h.Write(block)
		}
		return nil
	})
	fmt.Println(err)
	// Output: <nil>
}
