package admission

import "fmt"

// Class is a task's priority class, as the executor's: lower values are
// more urgent.
type Class uint8

const (
	Critical Class = iota
	Interactive
	Batch
	Background

	// NumClasses is the number of classes, for arrays indexed by Class.
	NumClasses = 4
)

// defaultWeight is each class's weight when ClassConfig.Weight is 0
// (only Interactive's and Batch's are used: order.go): 64 to 1, about
// Linux's weights for nice 0 and nice 19 (1024 and 15). Batch keeps a
// trickle of the slots while Interactive work waits, not a share that
// Interactive's requests pay for in overload.
var defaultWeight = [NumClasses]float64{1, 64, 1, 1}

var classNames = [NumClasses]string{"critical", "interactive", "batch", "background"}

// String returns the class's lower-case name ("critical", ...).
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// RunsOnWorker reports whether tasks of c run on executor-owned worker
// goroutines even when submitted with Do (Batch and Background): they
// count against the SpareP bound.
func (c Class) RunsOnWorker() bool { return c >= Batch }
