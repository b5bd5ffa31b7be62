package compress

import (
	"maps"
	"runtime"
	"sync"
	"time"
	"willow/internal/cpustat"
)

// taskCostWeight is the weight of one task in the moving averages of a
// codec's task seconds: about the last 16 tasks count.
const taskCostWeight = 1.0 / 16

// taskCost keeps, by image codec, two moving averages over the
// successful image tasks (heartbeat Load.image_task_seconds and
// image_task_cpu_seconds): the wall seconds a worker slot was held, and
// the CPU seconds of the task's own thread. The master multiplies them by
// the upload arrival rate to forecast how busy the workers will be before
// a queue forms (auto-flex's compress_forecast): CPU is what the codec
// costs wherever it runs, wall over CPU is how much the box stretches it
// now. A codec keeps its last averages while no task uses it.
type taskCost struct {
	mu   sync.Mutex         // guards wall and cpu
	wall map[string]float64 // codec -> seconds
	cpu  map[string]float64
}

// observe adds one task of codec that held a slot for wall and used cpu.
func (c *taskCost) observe(codec string, wall, cpu time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall == nil {
		c.wall, c.cpu = map[string]float64{}, map[string]float64{}
	}
	ewma(c.wall, codec, wall.Seconds())
	if cpu > 0 {
		ewma(c.cpu, codec, cpu.Seconds())
	}
}

func ewma(m map[string]float64, k string, v float64) {
	if old, ok := m[k]; ok {
		m[k] = old + taskCostWeight*(v-old)
	} else {
		m[k] = v
	}
}

// snapshot returns copies of the averages, nil before the first task.
func (c *taskCost) snapshot() (wall, cpu map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.wall) == 0 {
		return nil, nil
	}
	return maps.Clone(c.wall), maps.Clone(c.cpu)
}

// threadCPU measures the CPU of an image task: it locks the calling
// goroutine to its thread (the codecs run on it: decode, resize and
// encode, x265 without a thread pool) and returns a function that unlocks
// it and returns the thread's CPU since. 0 where the thread's usage
// cannot be read.
func threadCPU() func() time.Duration {
	runtime.LockOSThread()
	t0, ok := cpustat.Thread()
	return func() time.Duration {
		t1, ok1 := cpustat.Thread()
		runtime.UnlockOSThread()
		if !ok || !ok1 || t1 < t0 {
			return 0
		}
		return t1 - t0
	}
}
