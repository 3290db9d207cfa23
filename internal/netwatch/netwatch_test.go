package netwatch

import (
	"net"
	"runtime"
	"testing"
)

// A descriptor with unread input parks the first poll that sees it and,
// if the park did not get it read, the next poll once more; not a third
// time until a poll finds it drained. New descriptors park at once.
func TestUnreadInputParksAtMostTwicePerSighting(t *testing.T) {
	s := sightings{m: map[int32]uint8{}}
	steps := []struct {
		ready []int32
		park  bool
	}{
		{nil, false},
		{[]int32{5}, true},     // arrival on 5
		{[]int32{5}, true},     // still unread: the runtime missed it; once more
		{[]int32{5}, false},    // still unread: the application is not reading it
		{[]int32{5, 7}, true},  // a new arrival on 7 parks
		{[]int32{5, 7}, true},  // 7 unread a second time
		{[]int32{5, 7}, false}, // neither parks again
		{nil, false},           // both drained
		{[]int32{5}, true},     // a new arrival on 5
	}
	for i, st := range steps {
		if got := s.update(st.ready); got != st.park {
			t.Errorf("poll %d (ready %v): park %v, want %v", i, st.ready, got, st.park)
		}
	}
	if len(s.m) != 1 {
		t.Errorf("remembered %v, want only descriptor 5", s.m)
	}
}

// The poll Checkpoint makes per netPollInterval when nothing arrived: one
// zero-timeout epoll_wait on the watched set.
func BenchmarkNetworkPollNothingArrived(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("only Linux is watched")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer Watch(ln).Close()
	for b.Loop() {
		if arrived() {
			b.Fatal("an arrival on an idle listener")
		}
	}
}
