package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

// The quota cases' server runs in a child process with no split to feed
// (sp nil): each variant's server must still start (a nil split once
// failed the 1.5-CPU case's cpuwork server as "did not start").
func TestEveryInferenceServerStartsWithoutASplit(t *testing.T) {
	lib, models, err := workload.ONNXPaths()
	if errors.Is(err, workload.ErrNoONNX) {
		t.Skipf("optional: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.InitONNX(lib); err != nil {
		if errors.Is(err, workload.ErrNoONNX) {
			t.Skipf("optional: %v", err)
		}
		t.Fatal(err)
	}
	ref, err := workload.LoadReference(models, inferenceModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"naive", "pool", "sem", "cpuwork", "cpuwork-strict"} {
		srv, err := newInferenceServer(v, ref, 0, serving{slo: 100 * time.Millisecond, perImage: 3 * time.Millisecond}, nil)
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		srv.close()
	}
}
