exports.hello = (name) => 'hello ' + name;
