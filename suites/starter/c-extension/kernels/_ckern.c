/* Two small kernels: Adler-32 over a bytes-like object, and the dot product of two float lists. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *ckern_adler32(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const unsigned char *data = (const unsigned char *)view.buf;
    unsigned long a = 1, b = 0;
    for (Py_ssize_t i = 0; i < view.len; i++) {
        a = (a + data[i]) % 65521UL;
        b = (b + a) % 65521UL;
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong((b << 16) | a);
}

static PyObject *ckern_dot(PyObject *self, PyObject *args) {
    PyObject *xs, *ys;
    if (!PyArg_ParseTuple(args, "OO", &xs, &ys)) return NULL;
    PyObject *fx = PySequence_Fast(xs, "x must be a sequence");
    if (!fx) return NULL;
    PyObject *fy = PySequence_Fast(ys, "y must be a sequence");
    if (!fy) { Py_DECREF(fx); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fx);
    if (n != PySequence_Fast_GET_SIZE(fy)) {
        Py_DECREF(fx); Py_DECREF(fy);
        PyErr_SetString(PyExc_ValueError, "x and y differ in length");
        return NULL;
    }
    double total = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fx, i));
        double y = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fy, i));
        if (PyErr_Occurred()) { Py_DECREF(fx); Py_DECREF(fy); return NULL; }
        total += x * y;
    }
    Py_DECREF(fx);
    Py_DECREF(fy);
    return PyFloat_FromDouble(total);
}

static PyMethodDef methods[] = {
    {"adler32", ckern_adler32, METH_VARARGS, "Adler-32 checksum of a bytes-like object."},
    {"dot", ckern_dot, METH_VARARGS, "Dot product of two equal-length float sequences."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ckern", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ckern(void) { return PyModule_Create(&module); }
