package runner

import "testing"

func TestSmokeNative(t *testing.T) {
	sb, err := testSandbox()
	t.Logf("mode %s err %v", sb.Mode(), err)
	tr := newRunner(t, nil)
	resp := tr.exec("", code("python", "import os; print(os.getcwd(), os.getuid()); open('x.txt','w').write('hi')"))
	t.Logf("%+v", resp)
}
