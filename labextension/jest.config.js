// The panel's decisions (src/logic.ts) are plain TypeScript: tested without a browser or JupyterLab.
module.exports = {
  testEnvironment: 'node',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: { module: 'commonjs', esModuleInterop: true, strict: true, types: ['jest'] } }]
  },
  testMatch: ['<rootDir>/src/**/*.spec.ts']
};
